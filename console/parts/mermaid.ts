/**
 * Reads the Mermaid flowcharts the compiler writes (`<logicId>@<v>.mmd`) — only that subset: node
 * lines with a shape and a quoted label, and `-->`, `-.->` and `-.-o` edges with an optional
 * `|label|` — and lays them out in layers for an SVG. The `mermaid` package is not a dependency,
 * and a CDN is not allowed: this is enough for the graphs the compiler draws.
 */
export interface GraphNode {
  id: string;
  /** The step name (the label's first line), or the text of start/end/compensation nodes. */
  name: string;
  detail: string;
  shape: 'circle' | 'box' | 'diamond' | 'hexagon' | 'stadium' | 'sub' | 'slant';
  x: number;
  y: number;
  w: number;
  layer: number;
}

export interface GraphEdge {
  from: string;
  to: string;
  label: string;
  style: 'solid' | 'dotted' | 'compensate';
}

export interface Graph {
  nodes: GraphNode[];
  edges: GraphEdge[];
  width: number;
  height: number;
}

const SHAPES: [string, GraphNode['shape']][] = [
  ['((', 'circle'],
  ['[/', 'slant'],
  ['[\\', 'slant'],
  ['[[', 'sub'],
  ['{{', 'hexagon'],
  ['([', 'stadium'],
  ['[', 'box'],
  ['{', 'diamond'],
];
const NODE = /^\s*(\w+)(\(\(|\[\/|\[\\|\[\[|\{\{|\(\[|\[|\{)"(.*)"/;
const EDGE = /^\s*(\w+)\s+(-->|-\.->|-\.-o)(?:\|"?(.*?)"?\|)?\s*(\w+)\s*$/;

const unescapeLabel = (s: string) => s.replace(/#quot;/g, '"').replace(/#lt;/g, '<').replace(/#gt;/g, '>').replace(/#35;/g, '#');

export function parseMermaid(text: string): { nodes: Map<string, Omit<GraphNode, 'x' | 'y' | 'w' | 'layer'>>; edges: GraphEdge[] } {
  const nodes = new Map<string, Omit<GraphNode, 'x' | 'y' | 'w' | 'layer'>>();
  const edges: GraphEdge[] = [];
  for (const line of text.split('\n')) {
    const e = EDGE.exec(line);
    if (e) {
      const style = e[2] === '-->' ? 'solid' : e[2] === '-.->' ? 'dotted' : 'compensate';
      edges.push({ from: e[1]!, to: e[4]!, label: unescapeLabel(e[3] ?? ''), style });
      continue;
    }
    const n = NODE.exec(line);
    if (n) {
      const [first, ...rest] = unescapeLabel(n[3]!).split('<br/>');
      nodes.set(n[1]!, { id: n[1]!, name: first ?? n[1]!, detail: rest.join(' '), shape: SHAPES.find(([p]) => p === n[2])?.[1] ?? 'box' });
    }
  }
  return { nodes, edges };
}

const ROW = 78;
const GAP = 24;
const CHAR = 7;

/** Layers by the longest forward path from `start` (back edges ignored), compensations beside their step. */
export function layout(text: string): Graph {
  const { nodes, edges } = parseMermaid(text);
  const layer = new Map<string, number>();
  const forward = edges.filter((e) => e.style !== 'compensate');
  const order: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const visit = (id: string) => {
    if (state.has(id)) return;
    state.set(id, 'open');
    for (const e of forward) if (e.from === id && state.get(e.to) !== 'open') visit(e.to);
    state.set(id, 'done');
    order.unshift(id);
  };
  visit(nodes.has('start') ? 'start' : ([...nodes.keys()][0] ?? 'start'));
  for (const id of nodes.keys()) visit(id);
  const rank = new Map(order.map((id, i) => [id, i]));
  for (const id of order) {
    const mine = layer.get(id) ?? 0;
    layer.set(id, mine);
    for (const e of forward) {
      if (e.from === id && (rank.get(e.to) ?? 0) > (rank.get(id) ?? 0)) layer.set(e.to, Math.max(layer.get(e.to) ?? 0, mine + 1));
    }
  }
  // `end` goes last, below everything
  const last = Math.max(0, ...[...layer.entries()].filter(([id]) => id !== 'done').map(([, l]) => l));
  if (nodes.has('done')) layer.set('done', last + 1);
  for (const e of edges) if (e.style === 'compensate') layer.set(e.to, layer.get(e.from) ?? 0);

  const byLayer = new Map<number, string[]>();
  for (const id of nodes.keys()) {
    const l = layer.get(id) ?? 0;
    byLayer.set(l, [...(byLayer.get(l) ?? []), id]);
  }
  const placed: GraphNode[] = [];
  let width = 0;
  for (const [l, ids] of [...byLayer.entries()].sort((a, b) => a[0] - b[0])) {
    // steps first, compensations to their right
    ids.sort((a, b) => Number(a.startsWith('c')) - Number(b.startsWith('c')));
    let x = GAP;
    for (const id of ids) {
      const n = nodes.get(id)!;
      const w = n.shape === 'circle' ? 56 : Math.max(110, Math.min(260, Math.max(n.name.length, n.detail.length * 0.8) * CHAR + 28));
      placed.push({ ...n, x, y: GAP + l * ROW, w, layer: l });
      x += w + GAP;
    }
    width = Math.max(width, x);
  }
  // centre each layer on the widest
  for (const [l] of byLayer) {
    const row = placed.filter((n) => n.layer === l);
    const right = Math.max(...row.map((n) => n.x + n.w));
    const shift = (width - GAP - right) / 2;
    for (const n of row) n.x += shift;
  }
  const height = GAP * 2 + (Math.max(0, ...placed.map((n) => n.layer)) + 1) * ROW - (ROW - 44);
  return { nodes: placed, edges, width, height };
}

/** A node's height in the SVG. */
export const NODE_HEIGHT = 44;
const LABEL_MAX = 28;
const LABEL_CHAR = 6;
const LABEL_LINE = 13;

/** An edge as drawn: its path, and where its label goes (none for the compensation link). */
export interface RoutedEdge extends GraphEdge {
  d: string;
  text: string | null;
  labelX: number;
  labelY: number;
}

/** The label box an edge label takes, for telling overlaps apart. */
export function labelBox(e: Pick<RoutedEdge, 'text' | 'labelX' | 'labelY'>): { x: number; y: number; w: number; h: number } {
  return { x: e.labelX, y: e.labelY - LABEL_LINE + 3, w: (e.text?.length ?? 0) * LABEL_CHAR, h: LABEL_LINE };
}

/** Each edge's path and label position: down between layers, a bend to the right for a loop back, sideways to a compensation. */
export function routeEdges(g: Graph): RoutedEdge[] {
  const h = NODE_HEIGHT;
  const at = new Map(g.nodes.map((n) => [n.id, n]));
  const routed: RoutedEdge[] = [];
  for (const e of g.edges) {
    const a = at.get(e.from);
    const b = at.get(e.to);
    if (!a || !b) continue;
    const side = e.style === 'compensate';
    const x1 = side ? a.x + a.w : a.x + a.w / 2;
    const y1 = side ? a.y + h / 2 : a.y + h;
    const x2 = side ? b.x : b.x + b.w / 2;
    const y2 = side ? b.y + h / 2 : b.layer <= a.layer ? b.y + h : b.y;
    const back = !side && b.layer <= a.layer;
    const bend = back ? Math.max(a.x + a.w, b.x + b.w) + 30 : 0;
    const d = back ? `M${x1},${y1} C${bend},${y1 + 30} ${bend},${y2 - 30} ${x2},${y2}` : `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}`;
    const text = e.label && e.label !== 'compensate' ? (e.label.length > LABEL_MAX ? `${e.label.slice(0, LABEL_MAX - 1)}…` : e.label) : null;
    // where the label may go, best first: just above the target, where branches of one choice have
    // spread apart (a line higher, then two, when that is taken), else the middle of the edge
    const mid = { x: (x1 + x2) / 2 + 4, y: (y1 + y2) / 2 };
    const spots = back || side ? [mid] : [0, 1, 2].map((k) => ({ x: x2 + 4, y: y2 - 4 - k * LABEL_LINE })).concat([mid]);
    const placed = routed.filter((r) => r.text !== null).map(labelBox);
    const free = (p: { x: number; y: number }) => !placed.some((o) => overlaps(labelBox({ text, labelX: p.x, labelY: p.y }), o));
    const spot = text === null ? mid : (spots.find(free) ?? spots[0]!);
    routed.push({ ...e, d, text, labelX: spot.x, labelY: spot.y });
  }
  return routed;
}

function overlaps(a: ReturnType<typeof labelBox>, b: ReturnType<typeof labelBox>): boolean {
  return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}
