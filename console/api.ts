/** The console's only way to the engine: the HTTP API (ARCHITECTURE.md, Contracts: HTTP API) with the bearer token. */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly errors?: unknown,
  ) {
    super(message);
  }
}

export interface Session {
  token: string;
  env: string;
}

export function envPath(s: Session, path: string): string {
  return `/v1/envs/${encodeURIComponent(s.env)}${path}`;
}

export async function call<T>(s: Session, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: { authorization: `Bearer ${s.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  const json = text === '' ? null : JSON.parse(text);
  if (!res.ok) {
    throw new ApiError(res.status, json?.code ?? `HTTP_${res.status}`, json?.detail ?? json?.title ?? res.statusText, json?.errors);
  }
  return json as T;
}

export const get = <T>(s: Session, path: string) => call<T>(s, 'GET', envPath(s, path));
export const post = <T>(s: Session, path: string, body: unknown) => call<T>(s, 'POST', envPath(s, path), body);
export const patch = <T>(s: Session, path: string, body: unknown) => call<T>(s, 'PATCH', envPath(s, path), body);

/**
 * Reads a server-sent event stream with fetch (EventSource cannot send the Authorization header),
 * calling `onEvent` per event until `signal` aborts. Reconnects after a dropped connection.
 */
export async function stream(s: Session, path: string, onEvent: (type: string, data: unknown) => void, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    try {
      const res = await fetch(envPath(s, path), { headers: { authorization: `Bearer ${s.token}`, accept: 'text/event-stream' }, signal });
      if (!res.ok || res.body === null) throw new ApiError(res.status, `HTTP_${res.status}`, await res.text());
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end = buffer.indexOf('\n\n');
        while (end >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let type = 'message';
          const data: string[] = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) type = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
          }
          if (data.length > 0) onEvent(type, JSON.parse(data.join('\n')));
          end = buffer.indexOf('\n\n');
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && err.status >= 400 && err.status < 500) {
        onEvent('error', { code: err.code, message: err.message });
        return;
      }
    }
    // the server went away: come back after a pause (a reconnect gets a fresh snapshot)
    await new Promise((r) => setTimeout(r, 1000));
  }
}
