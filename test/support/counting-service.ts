import { FakeService } from './fake-service.ts';

/** A service that counts calls in flight, overall and per `key` of the body, and answers when `gate` lets it. */
export class CountingService extends FakeService {
  inFlight = 0;
  maxInFlight = 0;
  readonly perKey = new Map<string, number>();
  overlaps = 0;
  /** When each call arrived (performance.now()). */
  readonly arrivals: number[] = [];
  #gate: Promise<void> = Promise.resolve();
  #open: () => void = () => {};

  constructor() {
    super();
    this.on('/call', async (req) => {
      const key = String((req.body as { key?: unknown } | null)?.key ?? '');
      this.arrivals.push(performance.now());
      this.inFlight++;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
      const n = (this.perKey.get(key) ?? 0) + 1;
      this.perKey.set(key, n);
      if (n > 1) this.overlaps++;
      await this.#gate;
      // a service takes a while: other calls arrive while this one is in flight
      await new Promise((r) => setTimeout(r, 15));
      this.perKey.set(key, (this.perKey.get(key) ?? 1) - 1);
      this.inFlight--;
      return { status: 200, body: { ok: true } };
    });
  }

  /** Calls wait at the service until open() is called. */
  hold(): void {
    this.#gate = new Promise((r) => {
      this.#open = r;
    });
  }

  open(): void {
    this.#open();
    this.#gate = Promise.resolve();
  }
}
