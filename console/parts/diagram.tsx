import { useMemo } from 'preact/hooks';
import { type GraphNode, layout } from './mermaid.ts';

/** How a step stands in this instance; the diagram colours it so. */
export type Mark = 'done' | 'current' | 'failed' | 'compensated';

const CLASS: Record<Mark, string> = { done: 'm-done', current: 'm-current', failed: 'm-failed', compensated: 'm-compensated' };

function shape(n: GraphNode, h: number) {
  const { x, y, w } = n;
  switch (n.shape) {
    case 'circle':
      return <circle cx={x + w / 2} cy={y + h / 2} r={h / 2} />;
    case 'diamond':
      return <polygon points={`${x + w / 2},${y - 6} ${x + w + 8},${y + h / 2} ${x + w / 2},${y + h + 6} ${x - 8},${y + h / 2}`} />;
    case 'hexagon':
      return <polygon points={`${x + 10},${y} ${x + w - 10},${y} ${x + w},${y + h / 2} ${x + w - 10},${y + h} ${x + 10},${y + h} ${x},${y + h / 2}`} />;
    case 'slant':
      return <polygon points={`${x + 8},${y} ${x + w},${y} ${x + w - 8},${y + h} ${x},${y + h}`} />;
    default:
      return <rect x={x} y={y} width={w} height={h} rx={n.shape === 'stadium' ? h / 2 : 4} />;
  }
}

/** The version's diagram, steps marked done / current / failed / compensated. */
export function Diagram({ mmd, marks = {} }: { mmd: string; marks?: Record<string, Mark> }) {
  const g = useMemo(() => layout(mmd), [mmd]);
  const h = 44;
  const at = new Map(g.nodes.map((n) => [n.id, n]));
  return (
    <svg class="diagram" width={g.width} height={g.height} viewBox={`0 0 ${g.width} ${g.height}`} role="img" aria-label="workflow diagram">
      <defs>
        <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
          <path d="M0,0 L10,5 L0,10 z" />
        </marker>
      </defs>
      {g.edges.map((e) => {
        const a = at.get(e.from);
        const b = at.get(e.to);
        if (!a || !b) return null;
        const side = e.style === 'compensate';
        const x1 = side ? a.x + a.w : a.x + a.w / 2;
        const y1 = side ? a.y + h / 2 : a.y + h;
        const x2 = side ? b.x : b.x + b.w / 2;
        const y2 = side ? b.y + h / 2 : b.layer <= a.layer ? b.y + h : b.y;
        const back = !side && b.layer <= a.layer;
        const bend = back ? Math.max(a.x + a.w, b.x + b.w) + 30 : 0;
        const d = back ? `M${x1},${y1} C${bend},${y1 + 30} ${bend},${y2 - 30} ${x2},${y2}` : `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}`;
        return (
          <g class={`edge e-${e.style}`} key={`${e.from}-${e.to}-${e.label}`}>
            <path d={d} marker-end="url(#arrow)" />
            {e.label && e.label !== 'compensate' ? (
              <text x={(x1 + x2) / 2 + 4} y={(y1 + y2) / 2} class="edge-label">
                {e.label.length > 28 ? `${e.label.slice(0, 27)}…` : e.label}
              </text>
            ) : null}
          </g>
        );
      })}
      {g.nodes.map((n) => {
        const mark = marks[n.name];
        return (
          <g key={n.id} class={`node k-${n.shape} ${mark ? CLASS[mark] : ''} ${n.id.startsWith('c') && n.id !== 'c' ? 'n-comp' : ''}`} data-step={n.name} data-mark={mark ?? ''}>
            <title>{`${n.name}${n.detail ? ` — ${n.detail}` : ''}${mark ? ` (${mark})` : ''}`}</title>
            {shape(n, h)}
            <text x={n.x + n.w / 2} y={n.y + (n.detail && n.shape !== 'circle' ? 19 : h / 2 + 4)} class="n-name">
              {n.name.length > 32 ? `${n.name.slice(0, 31)}…` : n.name}
            </text>
            {n.detail && n.shape !== 'circle' ? (
              <text x={n.x + n.w / 2} y={n.y + 34} class="n-detail">
                {n.detail.length > 36 ? `${n.detail.slice(0, 35)}…` : n.detail}
              </text>
            ) : null}
          </g>
        );
      })}
    </svg>
  );
}
