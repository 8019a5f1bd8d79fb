/**
 * Reads the raw webhook body into one Buffer (`req.body`), with fewer copies than express.raw:
 * with a Content-Length (what GitHub, GitLab, Gitea and Forgejo send) of up to 4 MiB the buffer
 * is allocated once at its final size and every chunk is copied into it as it arrives, so nothing
 * is concatenated at the end. Bodies without a length (chunked) or larger ones are collected and
 * joined once. A compressed body
 * (Content-Encoding other than identity) goes to express.raw, which inflates it, so the accepted
 * requests and the answers to bad ones stay exactly those of express.raw:
 * over the limit → 413 (before reading, when the announced length says so); a body shorter or
 * longer than announced, or an aborted upload → 400.
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import { AppError } from '../../shared/errors.js';

export function rawBody(limit: number) {
  const inflatingReader = express.raw({ type: () => true, limit });

  return (req: Request, res: Response, next: NextFunction): void => {
    const encoding = (req.headers['content-encoding'] ?? 'identity').toLowerCase();
    if (encoding !== 'identity') {
      inflatingReader(req, res, next);
      return;
    }
    const announced = req.headers['content-length'];
    const hasBody = announced !== undefined || req.headers['transfer-encoding'] !== undefined;
    if (!hasBody) {
      next();
      return;
    }
    const parsedLength = announced === undefined ? Number.NaN : Number(announced);
    const length = Number.isSafeInteger(parsedLength) && parsedLength >= 0 ? parsedLength : null;
    if (length !== null && length > limit) {
      // Read nothing into memory; like body-parser, answer once the upload is drained, because
      // clients (fetch, curl) only read an answer after they have sent their whole body.
      drainThen(req, () => next(new AppError('PAYLOAD_TOO_LARGE', 'request body is larger than the limit')));
      return;
    }
    readInto(req, length, limit).then(
      (body) => {
        req.body = body;
        next();
      },
      (error: unknown) => next(error),
    );
  };
}

function drainThen(req: Request, then: () => void): void {
  if (req.complete) return then();
  let done = false;
  const once = (): void => {
    if (done) return;
    done = true;
    then();
  };
  req.on('end', once);
  req.on('close', once);
  req.on('error', once);
  req.resume();
}

/** Bodies up to this size are read into a buffer allocated once from Content-Length. */
const PRESIZE_MAX_BYTES = 4 * 1024 * 1024;

const unreadable = (): AppError => new AppError('VALIDATION_FAILED', 'the request body could not be read');

/** Copy the body into one buffer; on a problem stop keeping data, drain the rest, then reject. */
function readInto(req: Request, length: number | null, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    // Presized only up to PRESIZE_MAX_BYTES: a client announcing 25 MB and sending nothing must
    // not make the server reserve 25 MB up front. Larger bodies (rare) are joined once at the end.
    const sized = length === null || length > PRESIZE_MAX_BYTES ? null : Buffer.allocUnsafe(length);
    const chunks: Buffer[] = [];
    let received = 0;
    let failure: AppError | null = null;
    const onData = (chunk: Buffer): void => {
      if (failure) return;
      const end = received + chunk.length;
      if (end > limit) failure = new AppError('PAYLOAD_TOO_LARGE', 'request body is larger than the limit');
      else if (length !== null && end > length) failure = unreadable();
      else if (sized) chunk.copy(sized, received);
      else chunks.push(chunk);
      received = end;
    };
    let finished = false;
    const finish = (): void => {
      if (finished) return;
      finished = true;
      req.off('data', onData);
      drainThen(req, () => {
        if (!failure && (!req.complete || (length !== null && received !== length))) failure = unreadable();
        if (failure) reject(failure);
        else resolve(sized ?? (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received)));
      });
    };
    req.on('data', onData);
    req.once('end', finish);
    req.once('close', finish);
    req.once('error', finish);
  });
}
