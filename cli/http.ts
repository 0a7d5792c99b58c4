import { FlowError } from '../contracts/errors.ts';
import { type Args, flag, UsageError } from './args.ts';

/**
 * Exit codes of the commands that call the API, stable for scripts (docs/operations.md):
 * 0 done, 1 refused for another reason, 2 usage, 3 not found, 4 conflict (a verb that does not
 * apply in this state, an answered decision), 5 not authenticated or not allowed, 6 a bulk job
 * ended with failed items, 7 the engine could not be reached or failed (5xx).
 */
export const EXIT = { ok: 0, refused: 1, usage: 2, notFound: 3, conflict: 4, auth: 5, bulkFailures: 6, unreachable: 7 } as const;

/** An error the API answered (problem+json), carrying the exit code its status maps to. */
export class ApiProblem extends FlowError {
  constructor(
    status: number,
    code: string,
    detail: string,
    readonly exitCode: number,
  ) {
    super(code, detail, { status });
  }
}

export const exitFor = (status: number) =>
  status === 404 ? EXIT.notFound : status === 409 ? EXIT.conflict : status === 401 || status === 403 ? EXIT.auth : status >= 500 ? EXIT.unreachable : EXIT.refused;

export interface ApiTarget {
  url: string;
  token: string;
  env: string;
}

/** `--url`/`--token`/`--env`, else FLOW_URL/FLOW_TOKEN/FLOW_ENV. */
export function targetOf(args: Args): ApiTarget {
  const url = flag(args, 'url') ?? process.env['FLOW_URL'];
  const token = flag(args, 'token') ?? process.env['FLOW_TOKEN'];
  if (!url) throw new UsageError('no engine: pass --url http://… or set FLOW_URL');
  if (!token) throw new UsageError('no token: pass --token … or set FLOW_TOKEN (s8flow token mints one in development)');
  return { url: url.replace(/\/+$/, ''), token, env: flag(args, 'env') ?? process.env['FLOW_ENV'] ?? 'default' };
}

export async function api<T>(t: ApiTarget, method: string, path: string, body?: unknown): Promise<T> {
  let res: Response;
  try {
    // a path of its own (`/v1/…`) spans every env; any other is the target env's
    res = await fetch(path.startsWith('/v1/') ? `${t.url}${path}` : `${t.url}/v1/envs/${encodeURIComponent(t.env)}${path}`, {
      method,
      headers: { authorization: `Bearer ${t.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch (err) {
    throw new ApiProblem(0, 'CLI_UNREACHABLE', `cannot reach ${t.url}: ${(err as Error).message}`, EXIT.unreachable);
  }
  const text = await res.text();
  let json: { code?: string; detail?: string; title?: string } | null = null;
  try {
    json = text === '' ? null : JSON.parse(text);
  } catch {
    json = null;
  }
  if (!res.ok) throw new ApiProblem(res.status, json?.code ?? `HTTP_${res.status}`, json?.detail ?? json?.title ?? (text || res.statusText), exitFor(res.status));
  return json as T;
}

/** A JSON value from `--name '{"a":1}'` or `--name @file.json`. */
export async function jsonFlag(args: Args, name: string): Promise<unknown> {
  const raw = flag(args, name);
  if (raw === undefined) return undefined;
  const text = raw.startsWith('@') ? await (await import('node:fs/promises')).readFile(raw.slice(1), 'utf8') : raw;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new UsageError(`--${name} is not JSON: ${(err as Error).message}`);
  }
}
