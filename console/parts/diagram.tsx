import { useMemo } from 'preact/hooks';
import { type GraphNode, layout, NODE_HEIGHT, routeEdges } from './mermaid.ts';

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
  const edges = useMemo(() => routeEdges(g), [g]);
  const h = NODE_HEIGHT;
  return (
    <svg class="diagram" width={g.width} height={g.height} viewBox={`0 0 ${g.width} ${g.height}`} role="img" aria-label="workflow diagram">
      <defs>
        <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
          <path d="M0,0 L10,5 L0,10 z" />
        </marker>
      </defs>
      {edges.map((e) => (
        <g class={`edge e-${e.style}`} key={`${e.from}-${e.to}-${e.label}`}>
          <path d={e.d} marker-end="url(#arrow)" />
          {e.text === null ? null : (
            <text x={e.labelX} y={e.labelY} class="edge-label">
              <title>{e.label}</title>
              {e.text}
            </text>
          )}
        </g>
      ))}
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
