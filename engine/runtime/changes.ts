import type { Db } from '../store/db.ts';

type Listener = () => void;

/**
 * Fans the `flow_changes` NOTIFY (one per changed instance, payload its id; see migration 0009)
 * out to subscribers of that id, over one LISTEN connection however many pages watch. A
 * reconnect notifies '' and everyone hears it, since changes may have been missed meanwhile.
 */
export class Changes {
  readonly #byId = new Map<string, Set<Listener>>();
  #unlisten: Promise<() => Promise<void>> | null = null;

  constructor(private readonly db: Db) {}

  async subscribe(id: string, listener: Listener): Promise<() => void> {
    this.#unlisten ??= this.db.listen('flow_changes', (payload) => this.#notify(payload));
    await this.#unlisten;
    const set = this.#byId.get(id) ?? new Set();
    set.add(listener);
    this.#byId.set(id, set);
    return () => {
      set.delete(listener);
      if (set.size === 0) this.#byId.delete(id);
    };
  }

  #notify(id: string): void {
    const targets = id === '' ? [...this.#byId.values()] : [this.#byId.get(id) ?? new Set<Listener>()];
    for (const set of targets) for (const l of set) l();
  }

  async close(): Promise<void> {
    const unlisten = this.#unlisten;
    this.#unlisten = null;
    this.#byId.clear();
    if (unlisten !== null) await (await unlisten)();
  }
}
