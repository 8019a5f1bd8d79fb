import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify';
import type { Bindings, ChildLoggerOptions } from 'pino';

/**
 * request.log and reply.log without a pino child logger per request (Fastify's childLoggerFactory,
 * app.ts). Fastify makes one for every request (pino copies the bindings, serializes them and builds
 * a logger object: 3–5 µs of CPU per request in the framework benchmark's profiles), and the API
 * rarely writes a line through it: it has no request log (the proxy keeps one), and its own lines name
 * the request id themselves (http/problem.ts). This stands in for the child and makes the real one on
 * the first line written, so such a line still carries the request id (`reqId`) exactly as before.
 */
class DeferredChildLogger {
  #child: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  private get bound(): FastifyBaseLogger {
    return (this.#child ??= this.parent.child(this.bindings, this.options));
  }

  get level(): string {
    return this.#child?.level ?? this.options.level ?? this.parent.level;
  }

  set level(level: string) {
    this.bound.level = level;
  }

  fatal(...args: Parameters<FastifyBaseLogger['fatal']>): void {
    this.bound.fatal(...args);
  }

  error(...args: Parameters<FastifyBaseLogger['error']>): void {
    this.bound.error(...args);
  }

  warn(...args: Parameters<FastifyBaseLogger['warn']>): void {
    this.bound.warn(...args);
  }

  info(...args: Parameters<FastifyBaseLogger['info']>): void {
    this.bound.info(...args);
  }

  debug(...args: Parameters<FastifyBaseLogger['debug']>): void {
    this.bound.debug(...args);
  }

  trace(...args: Parameters<FastifyBaseLogger['trace']>): void {
    this.bound.trace(...args);
  }

  silent(...args: Parameters<FastifyBaseLogger['silent']>): void {
    this.bound.silent(...args);
  }

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.bound.child(bindings, options);
  }
}

/** Fastify's childLoggerFactory: the request's logger, made only when something is logged through it. */
export const deferredChildLogger: NonNullable<FastifyServerOptions['childLoggerFactory']> = (logger, bindings, options) =>
  new DeferredChildLogger(logger, bindings, options) as unknown as FastifyBaseLogger;
