// The webhook part of the Driver seam: endpoints, their secrets and health, the attempt log, and
// the webhook jobs that resend and replay insert. Kept apart from the hot-path Executor.

export type EndpointState = 'enabled' | 'failing' | 'disabled';
export const ENDPOINT_STATES: readonly EndpointState[] = ['enabled', 'failing', 'disabled'];

/** An endpoint as every read returns it: never a secret, only the newest secret's hint. */
export interface EndpointRow {
  id: string;
  url: string;
  description: string;
  /** Exact types and `prefix.*` patterns. */
  eventTypes: string[];
  state: EndpointState;
  failingSince: Date | null;
  /**
   * When a delivery to it last succeeded, null while none has been noted. Approximate: a success
   * is noted only once the noted time is a tenth of webhooks.failingDelayMs old (30 s by default),
   * so the real last success may be up to that much later (with failingDelayMs 0, only the
   * success that ends a failing spell is noted). A test delivery never counts.
   */
  lastSuccessAt: Date | null;
  disabledAt: Date | null;
  disabledReason: string | null;
  /** The last 4 characters of the newest secret before its base64 padding. */
  secretHint: string;
  createdAt: Date;
  updatedAt: Date;
}

/** What the webhook channel needs to send one delivery: the URL and the secrets valid now. */
export interface EndpointForDelivery {
  id: string;
  url: string;
  state: EndpointState;
  /** The patterns it subscribes to now. */
  eventTypes: string[];
  /** Active secrets, newest first. */
  secrets: string[];
}

export type AttemptOutcome = 'success' | 'failure' | 'gone' | 'throttled' | 'refused';

export interface AttemptInsert {
  /** Null for a test delivery (`endpoints test`), which is not a job. */
  jobId: string | null;
  endpointId: string;
  eventId: string;
  webhookId: string;
  attempt: number;
  status: number | null;
  durationMs: number;
  outcome: AttemptOutcome;
  responseExcerpt: string;
  error: string | null;
}

export interface AttemptRow extends Omit<AttemptInsert, 'jobId'> {
  id: string;
  /** The delivery (job) id; null for a test delivery. */
  deliveryId: string | null;
  at: Date;
}

/**
 * How an attempt moves its endpoint: 'success' clears failing, 'failure' starts or continues it
 * (when `answered`, the receiver's own answer, only when no success came within failingDelayMs;
 * otherwise at once), 'gone' disables it with `reason`, 'none' leaves it (a test delivery).
 */
export type HealthEffect =
  | { effect: 'success' }
  | { effect: 'failure'; answered: boolean }
  | { effect: 'gone'; reason: string }
  | { effect: 'none' };

export interface WebhookJobParams {
  maxAttempts: number;
  leaseMs: number;
}

export interface WebhookExecutor {
  endpointInsert(p: {
    id: string; url: string; description: string; eventTypes: string[];
    secret: string; secretHint: string; now: Date | null;
  }): Promise<EndpointRow>;
  /** Oldest first (ids are UUIDv7, so by creation), those after `after` (an id) when given. */
  endpointList(p: { state: EndpointState | null; limit: number; after: string | null }): Promise<EndpointRow[]>;
  endpointGet(p: { id: string }): Promise<EndpointRow | null>;
  /** Null fields are left as they are. */
  endpointUpdate(p: {
    id: string; url: string | null; description: string | null; eventTypes: string[] | null; now: Date | null;
  }): Promise<EndpointRow | null>;
  /** The owner's act: 'enabled' clears failing and disabled fields; 'disabled' records `reason`. Null when missing, when disabling one already disabled, or when enabling one already enabled with nothing to clear. */
  endpointSetState(p: { id: string; state: 'enabled' | 'disabled'; reason: string | null; now: Date | null }): Promise<EndpointRow | null>;
  /** Add `secret` as the newest; older active secrets expire `graceMs` from now; expired ones, and active ones beyond the newest few (the driver's cap), are dropped. */
  endpointRotateSecret(p: { id: string; secret: string; secretHint: string; graceMs: number; now: Date | null }): Promise<EndpointRow | null>;
  /** Delete an endpoint and cancel its waiting deliveries; null when there is no such endpoint. */
  endpointDelete(p: { id: string; now: Date | null }): Promise<{ cancelled: number } | null>;
  endpointGetForDelivery(p: { id: string; now: Date | null }): Promise<EndpointForDelivery | null>;
  /** Disable endpoints failing since before now − failingForMs; returns their ids. */
  endpointDisableFailing(p: { failingForMs: number; reason: string; limit: number; now: Date | null }): Promise<string[]>;

  /** Write one attempt and apply its effect on the endpoint, in one statement; returns the endpoint's new state when it changed. */
  /**
   * The attempt row and the endpoint's health in one statement. A failure also moves the
   * endpoint's other due deliveries `failingDelayMs` out, and a success that makes it enabled again
   * brings back to now those the failing delay still holds (not those waiting for their own retry).
   */
  attemptRecord(p: { attempt: AttemptInsert; health: HealthEffect; failingDelayMs: number; now: Date | null }): Promise<{ stateChangedTo: EndpointState | null }>;
  /** Newest first. */
  attemptList(p: { endpointId: string | null; eventId: string | null; beforeId: string | null; limit: number }): Promise<AttemptRow[]>;
  /** Delete up to `limit` attempts older than now − olderThanMs; returns how many. */
  attemptDeleteOlder(p: { olderThanMs: number; limit: number; now: Date | null }): Promise<number>;

  /** A new delivery of `eventId` to `endpointId` (resend, replay), due now; null when the event or endpoint is missing. */
  webhookJobInsert(p: { eventId: string; endpointId: string; job: WebhookJobParams; now: Date | null }): Promise<string | null>;
  /** The event and endpoint of a webhook job (a delivery); null when no such webhook job exists. */
  webhookJobGet(p: { jobId: string }): Promise<{ eventId: string; endpointId: string } | null>;
}
