import { pino, type Logger, type LoggerOptions } from 'pino';

/**
 * Paths that may carry credentials anywhere in a log line. Redaction happens inside pino, so a
 * secret never reaches the output stream even when a whole request or config object is logged.
 */
export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-gitlab-token"]',
  'req.headers["x-hub-signature-256"]',
  'req.headers["x-hub-signature"]',
  'res.headers["set-cookie"]',
  '*.password',
  '*.secret',
  '*.token',
  '*.client_secret',
  '*.accessToken',
  'config.databaseUrl',
];

export interface CreateLoggerOptions {
  level?: string;
  /** Extra fields bound to every line (service name, version). */
  base?: Record<string, unknown>;
  /** Where to write; tests pass a stream to read the lines back. */
  destination?: NodeJS.WritableStream;
}

export function createLogger(name: string, options: CreateLoggerOptions = {}): Logger {
  const pinoOptions: LoggerOptions = {
    name,
    level: options.level ?? 'info',
    base: { service: name, ...options.base },
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return options.destination
    ? pino(pinoOptions, options.destination as Parameters<typeof pino>[1])
    : pino(pinoOptions);
}
