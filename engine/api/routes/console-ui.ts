import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Engine } from '../../runtime/engine.ts';
import { consoleBundle } from '../console-bundle.ts';

export interface ConsoleUiOptions {
  engine: Engine;
  /**
   * `s8flow dev` only: mints the token the console signs in with by itself, handed only to a page
   * loaded from localhost, 127.0.0.1 or [::1] on the listening port. Never set in production.
   */
  devToken?: () => Promise<string>;
  /** The env the console opens on when the token does not name one. (Default: the engine's) */
  env?: string;
}

/** The page every console URL answers with; its config is inline, which saves the app a round trip. */
const shell = (config: unknown) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sentin8 Flow</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/assets/console.css">
<script id="flow-config" type="application/json">${JSON.stringify(config).replace(/</g, '\\u003c')}</script></head>
<body><div id="app"></div><script type="module" src="/ui/assets/console.js"></script></body></html>`;

const hidden = { hide: true } as const;

const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '[::1]']);

/**
 * True when the page was asked for by a loopback name or address on the port this socket listens
 * on: the only pages `s8flow dev` hands its token to. DNS rebinding (a page of evil.example whose
 * name now resolves to 127.0.0.1) reaches the same socket but sends its own name as `Host`.
 */
function fromLoopback(req: FastifyRequest): boolean {
  const m = /^(\[[^\]]*\]|[^:]+)(?::(\d{1,5}))?$/.exec((req.headers.host ?? '').toLowerCase());
  if (m === null || !LOOPBACK_NAMES.has(m[1]!)) return false;
  return Number(m[2] ?? 80) === req.socket.localPort;
}

/** The console's single-page app at `/ui`: its bundle (built by esbuild at boot), its config, and the page shell. */
export const consoleUiRoutes: FastifyPluginAsyncZod<ConsoleUiOptions> = async (app, opts) => {
  const { engine } = opts;
  const bundle = consoleBundle();
  app.get('/ui', { config: { scope: null }, schema: hidden }, (_req, reply) => reply.redirect('/ui/'));
  app.get('/ui/*', { config: { scope: null }, schema: hidden }, async (req, reply) => {
    const path = (req.params as { '*': string })['*'];
    if (path === 'assets/console.js') return reply.type('text/javascript; charset=utf-8').header('cache-control', 'no-cache').send((await bundle).js);
    if (path === 'assets/console.css') return reply.type('text/css; charset=utf-8').header('cache-control', 'no-cache').send((await bundle).css);
    const config = { env: opts.env ?? engine.env, ...(opts.devToken && fromLoopback(req) ? { devToken: await opts.devToken() } : {}) };
    if (path === 'config.json') return config;
    // every other path is a page of the single-page app
    return reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(shell(config));
  });
};
