// rea's public API. Explicit exports only.
export { createBus } from './bus.js';
export type { Bus, BusOptions, DatabaseOptions, Overview, RecordItem, RecordOptions } from './bus.js';
export type { PGliteDatabase, PGliteTransactionLike } from './drivers/pglite/database.js';
export { defineEvents } from './core/events.js';
export type { EventCatalog, EventSchemas, EventType, HandlerName, MatchingTypes, PayloadInput, PayloadOutput, ReaEvent, UnmatchedPattern } from './core/events.js';
export {
  BusStateError, DatabaseError, DataDirLockedError, DuplicateHandlerError, HandlerInUseError, InvalidFilterError, ModuleLoadError, NotFoundError, OptionsError, PayloadNotJsonError, PayloadTooLargeError,
  PayloadValidationError, PermanentError, ReaError, RetryAfterError, TransactionError, UnknownEventTypeError, UnsupportedTransactionError,
  permanent, retryAfter,
} from './core/errors.js';
export type { PayloadIssue, ReaErrorCode } from './core/errors.js';
export { exponentialBackoff } from './core/backoff.js';
export type { Backoff } from './core/backoff.js';
export { ManualClock } from './core/clock.js';
export type { Clock } from './core/clock.js';
export { DEFAULTS } from './core/options.js';
export type { HandlerOptions } from './core/options.js';
export type { Lifecycle, LifecycleEvents, LifecycleName } from './core/lifecycle.js';
export type { JobLogger, Logger } from './core/logger.js';
export type { HandlerContext } from './worker/registry.js';
// The reasons ctx.signal aborts with (the handler's timeoutMs; a stop), and what runHandlerNow rejects with at the timeout.
export { HandlerTimeoutError, WorkerStoppingError } from './worker/worker.js';
// Failures rea itself gives a job's attempt; a job's error history stores them under these names.
export { MissingEventError } from './worker/worker.js';
export { HandlerTransactionEndedError, LeaseLostError } from './channels/handler/run.js';
export type { Transaction } from './tx/rea.js';
export type { Driver, EventRow, JobRow, JobState, Queryable } from './driver/types.js';
export type { EventState, EventSummary, JobSummary } from './driver/admin.js';
export type { EventListFilter, JobListFilter, Page } from './core/filters.js';
export { uuidv7 } from './core/uuid.js';
export type { Alert, AlertEvaluator, AlertThresholds } from './admin/alerts.js';
export type { AppTableRetention, RetentionReport, RetentionRuleReport } from './maintenance/retention.js';
export { createAdminHandler } from './admin/handler.js';
export type { AdminHandler, AdminHandlerOptions } from './admin/handler.js';
export { AdminCredentialsMissingError } from './admin/auth.js';
export type { AdminAuth } from './admin/auth.js';
export { WebhookSecretError, WebhookUrlRefusedError } from './channels/webhook/errors.js';
export { verifyPayload } from './channels/webhook/signature.js';
export type { WebhookEnvelope, WebhookOptions } from './channels/webhook/channel.js';
export type { Endpoint, EndpointChanges, EndpointInput, EndpointListFilter, EndpointWithSecret, NewDelivery, WebhookAttempt } from './channels/webhook/endpoints.js';
export type { EventReplayFilter, HandlerBulkReplay, HandlerReplay } from './worker/replay.js';
export type { EndpointState } from './driver/webhooks.js';
