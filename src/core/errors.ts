// rea's typed errors. Every error a user can cause names the problem and carries a stable `code`.

export type ReaErrorCode =
  | 'ERR_OPTIONS'
  | 'ERR_UNKNOWN_EVENT_TYPE'
  | 'ERR_PAYLOAD_INVALID'
  | 'ERR_PAYLOAD_NOT_JSON'
  | 'ERR_PAYLOAD_TOO_LARGE'
  | 'ERR_UNSUPPORTED_TRANSACTION'
  | 'ERR_DUPLICATE_HANDLER'
  | 'ERR_BUS_STATE'
  | 'ERR_MIGRATION'
  | 'ERR_DATABASE'
  | 'ERR_MODULE'
  | 'ERR_NOT_FOUND'
  | 'ERR_INVALID_FILTER'
  | 'ERR_TRANSACTION'
  /** The rea command line was wrong (the CLI's UsageError). */
  | 'ERR_USAGE'
  /** A given webhook secret is malformed (WebhookSecretError). */
  | 'ERR_WEBHOOK_SECRET'
  /** The SSRF guard refused a webhook URL (WebhookUrlRefusedError). */
  | 'ERR_WEBHOOK_URL_REFUSED';

export class ReaError extends Error {
  readonly code: ReaErrorCode;
  constructor(code: ReaErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** An option given to createBus, bus.on or a service is missing or out of range. */
export class OptionsError extends ReaError {
  constructor(readonly field: string, problem: string, options?: { cause?: unknown }) {
    super('ERR_OPTIONS', `invalid option ${field}: ${problem}`, options);
  }
}

export class UnknownEventTypeError extends ReaError {
  constructor(readonly type: string, known: readonly string[]) {
    const list = known.length ? known.map((k) => `'${k}'`).join(', ') : '(none defined)';
    super('ERR_UNKNOWN_EVENT_TYPE', `unknown event type '${type}'; defined types: ${list}`);
  }
}

export interface PayloadIssue {
  path: string;
  message: string;
}

/** The payload failed the event type's schema. `issues[0].path` names the first bad field. */
export class PayloadValidationError extends ReaError {
  constructor(readonly type: string, readonly issues: PayloadIssue[]) {
    const first = issues[0];
    const where = first && first.path ? ` at ${first.path}` : '';
    const more = issues.length > 1 ? ` (and ${issues.length - 1} more issue${issues.length > 2 ? 's' : ''})` : '';
    super('ERR_PAYLOAD_INVALID', `payload for '${type}' is invalid${where}: ${first?.message ?? 'rejected by schema'}${more}`);
  }
}

/** The payload holds a value JSON cannot carry faithfully (undefined, BigInt, function, cycle…). */
export class PayloadNotJsonError extends ReaError {
  constructor(readonly type: string, readonly path: string, problem: string) {
    super('ERR_PAYLOAD_NOT_JSON', `payload for '${type}' cannot be stored as JSON at ${path || '(root)'}: ${problem}`);
  }
}

export class PayloadTooLargeError extends ReaError {
  constructor(readonly type: string, readonly bytes: number, readonly limit: number) {
    super('ERR_PAYLOAD_TOO_LARGE', `payload for '${type}' is ${bytes} bytes, over the limit of ${limit} bytes (maxPayloadBytes)`);
  }
}

/** record() (or recordMany, or rea/testing's recordedIn, expectRecorded) was given something that is not an open transaction. */
export class UnsupportedTransactionError extends ReaError {
  constructor(message: string) {
    super('ERR_UNSUPPORTED_TRANSACTION', message);
  }
}

export class DuplicateHandlerError extends ReaError {
  constructor(readonly handler: string) {
    super('ERR_DUPLICATE_HANDLER', `a handler named '${handler}' is already registered; handler names must be unique`);
  }
}

export class BusStateError extends ReaError {
  constructor(message: string) {
    super('ERR_BUS_STATE', message);
  }
}

/**
 * handlers.forget refused a handler a running worker had within the unattended window (`within`,
 * as people read it). `force` is how the caller overrides the refusal in the surface it used:
 * `{ force: true }` in code; the CLI says `--force` (withForce).
 */
export class HandlerInUseError extends BusStateError {
  constructor(readonly handler: string, readonly seenAt: Date, private readonly within: string, force = '{ force: true }') {
    super(`handler '${handler}' was had by a running worker at ${seenAt.toISOString()}, within the last ${within}: stop it first, or pass ${force}`);
  }

  /** The same refusal, naming another way to force it (a command line's flag). */
  withForce(force: string): HandlerInUseError {
    return new HandlerInUseError(this.handler, this.seenAt, this.within, force);
  }
}

/**
 * The database could not be used: `unreachable` (nothing answers there now: worth retrying),
 * `refused` (it answered no: authentication, a database that does not exist), `not-migrated`
 * (rea's tables are missing from the schema), `too-new` (a newer rea migrated the schema in a
 * way this one must not run against), `locked` (a PGlite directory another process has open:
 * DataDirLockedError) or `pooler` (a pooler in transaction mode that rea was not told of, see
 * database.pooler; retried, as nothing is wrong with what was asked). The driver's own error is the `cause`.
 */
export class DatabaseError extends ReaError {
  constructor(readonly kind: 'unreachable' | 'refused' | 'not-migrated' | 'too-new' | 'locked' | 'pooler', message: string, options?: { cause?: unknown }) {
    super('ERR_DATABASE', message, options);
  }
}

/**
 * A PGlite data directory is open in another process (or through another bus of this one), whose
 * pid its lock file holds: PGlite is PostgreSQL inside one process, with nothing to keep a second
 * one off the same files, so rea refuses to open it twice.
 */
export class DataDirLockedError extends DatabaseError {
  constructor(readonly directory: string, readonly pid: number, readonly lockFile: string) {
    super('locked', pid === process.pid
      ? `the PGlite directory ${directory} is already open in this process (another bus or driver on it): PGlite serves one opener at a time; share that bus`
      : `the PGlite directory ${directory} is open in process ${pid}: PGlite serves one process at a time; stop that process first (or use PostgreSQL for several). If no rea runs as pid ${pid}, delete ${lockFile}`);
  }
}

/**
 * bus.transaction() could not commit what its callback did, and says so instead of reporting
 * success: `aborted` (a statement failed and its error was caught inside the callback, so
 * PostgreSQL had already rolled the transaction back; its COMMIT would have answered ROLLBACK
 * and nothing would have been stored) or `ended` (the callback ended the transaction itself, a
 * COMMIT or ROLLBACK on tx.raw; what ran after it ran outside any transaction). `control`:
 * tx.query was given a statement that begins or ends a transaction, and did not send it.
 */
export class TransactionError extends ReaError {
  constructor(readonly kind: 'aborted' | 'ended' | 'control' | 'closed', message: string, cause?: unknown) {
    super('ERR_TRANSACTION', message, cause === undefined ? undefined : { cause });
  }
}

/** TransactionError('aborted')'s message, for every driver. */
export const ABORTED_TRANSACTION = 'a statement of this transaction failed and its error was caught inside the callback: PostgreSQL rolled the whole transaction back, so nothing of it was stored; let the error through, or put that statement in a savepoint (SAVEPOINT s … ROLLBACK TO SAVEPOINT s) to go on after it';

/** A module the CLI was told to load (rea run, retention run --module) failed to import or to build its bus. */
export class ModuleLoadError extends ReaError {
  constructor(readonly path: string, problem: string, options?: { cause?: unknown }) {
    super('ERR_MODULE', `cannot load ${path}: ${problem}`, options);
  }
}

export class NotFoundError extends ReaError {
  /** `detail` follows the message, e.g. what there is instead. */
  constructor(what: string, detail?: string) {
    super('ERR_NOT_FOUND', `${what} not found${detail ? `; ${detail}` : ''}`);
  }
}

/** A list filter (events, jobs) is malformed; `parameter` names it, as the HTTP API's 400 does. */
export class InvalidFilterError extends ReaError {
  constructor(readonly parameter: string, problem: string) {
    super('ERR_INVALID_FILTER', `invalid filter ${parameter}: ${problem}`);
  }
}

// ---- errors a handler throws to steer its own retries ----

const PERMANENT = Symbol.for('rea.permanent');
const RETRY_AFTER = Symbol.for('rea.retryAfter');

/** Thrown by a handler: discard the job now, no more attempts. */
export class PermanentError extends Error {
  readonly [PERMANENT] = true;
  constructor(readonly reason: unknown) {
    super(reason instanceof Error ? reason.message : String(reason), { cause: reason });
    this.name = 'PermanentError';
  }
}

/** Thrown by a handler: retry after `delayMs` instead of the backoff schedule. */
export class RetryAfterError extends Error {
  readonly [RETRY_AFTER] = true;
  constructor(readonly delayMs: number, reason?: unknown) {
    super(reason === undefined ? `retry requested in ${delayMs} ms` : reason instanceof Error ? reason.message : String(reason), { cause: reason });
    this.name = 'RetryAfterError';
  }
}

export function permanent(reason: unknown): PermanentError {
  return new PermanentError(reason);
}

export function retryAfter(delayMs: number, reason?: unknown): RetryAfterError {
  if (!Number.isFinite(delayMs) || delayMs < 0) throw new OptionsError('retryAfter(delayMs)', `must be a finite number ≥ 0, got ${delayMs}`);
  return new RetryAfterError(delayMs, reason);
}

export function isPermanent(err: unknown): err is PermanentError {
  return typeof err === 'object' && err !== null && (err as Record<symbol, unknown>)[PERMANENT] === true;
}

export function isRetryAfter(err: unknown): err is RetryAfterError {
  return typeof err === 'object' && err !== null && (err as Record<symbol, unknown>)[RETRY_AFTER] === true;
}
