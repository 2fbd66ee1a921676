// The webhook channel: turns a claimed webhook job into one signed HTTP attempt, writes the
// attempt log and the endpoint's health in one statement, and tells the worker what comes next
// (complete, retry on the attempt⁴ schedule or at a later Retry-After, or discard).
import { attemptInAllowance } from '../../core/backoff.js';
import { appNow, type Clock } from '../../core/clock.js';
import { permanent, retryAfter } from '../../core/errors.js';
import { storable } from '../../core/errors-format.js';
import { patternMatches } from '../../core/events.js';
import type { Lifecycle } from '../../core/lifecycle.js';
import type { LazyLogger } from '../../core/logger.js';
import type { JobAbort } from '../../worker/abort.js';
import { WorkerStoppingError } from '../../worker/worker.js';
import { uuidv7 } from '../../core/uuid.js';
import type { ClaimedJob, ClaimTarget, Driver, StoredEvent } from '../../driver/types.js';
import type { AttemptOutcome, EndpointState, HealthEffect } from '../../driver/webhooks.js';
import type { JobChannel, RunOutcome } from '../../worker/channel.js';
import { deliver, type DeliveryResult, type Resolver } from './http.js';
import { webhookRetryDelayMs } from './retry.js';
import { signPayload } from './signature.js';

/** createBus({ webhooks }): every field optional, defaults in DEFAULTS.webhooks. */
export interface WebhookOptions {
  /** Run webhook deliveries in this process's workers (default true). */
  enabled?: boolean;
  /** Deliver to loopback, private, link-local, CGNAT and unique-local addresses (default false; tests, the demo). */
  allowPrivateNetworks?: boolean;
  /** Hosts ("hooks.internal", "*.internal"), IPs and CIDR blocks reachable despite their address. */
  allowlist?: string[];
  /** After rotateSecret, the previous secret keeps signing this long (default 24 h). */
  secretGraceMs?: number;
  /** Attempts per delivery (default 18). */
  maxAttempts?: number;
  /** Whole HTTP attempt (default 15 s); connect (default 5 s). */
  timeoutMs?: number;
  connectTimeoutMs?: number;
  /** Response bytes read at most (default 64 KiB). */
  maxResponseBytes?: number;
  /** Longest Retry-After honoured (default 24 h). */
  maxRetryAfterMs?: number;
  /** Deliveries at once in this process, within worker.concurrency (default 'auto': half of it, at least 1, so handlers keep room). */
  concurrency?: number | 'auto';
  /** Deliveries at once to one endpoint in this process, within concurrency (default 4); the rest wait in the queue. */
  concurrencyPerEndpoint?: number;
  /**
   * Delay of new deliveries while an endpoint is failing (default 5 min); also how recent a success
   * keeps an endpoint enabled through failures its receiver answered (one message it refuses).
   */
  failingDelayMs?: number;
  /** Continuous failure after which the health pass disables an endpoint (default 5 days). */
  disableAfterMs?: number;
  healthIntervalMs?: number;
  /** Attempt-log retention (default 7 days). */
  attemptRetentionMs?: number;
  attemptRetentionIntervalMs?: number;
  attemptRetentionBatchSize?: number;
  /** Replaces the system resolver (custom DNS, tests). Every answer is still vetted. */
  resolve?: Resolver;
}

/** Webhook settings with every default resolved (see DEFAULTS.webhooks). */
export interface WebhookSettings {
  allowPrivateNetworks: boolean;
  allowlist: string[];
  timeoutMs: number;
  connectTimeoutMs: number;
  maxResponseBytes: number;
  maxRetryAfterMs: number;
  resolve?: Resolver;
  concurrency: number;
  concurrencyPerEndpoint: number;
  maxAttempts: number;
  /** Lease of a webhook job: longer than the worker's cut-off, which is longer than the HTTP timeout. */
  leaseMs: number;
  failingDelayMs: number;
  secretGraceMs: number;
}

/** The JSON body every delivery posts. `id` is the event's id: the same in a resend or replay. */
export interface WebhookEnvelope {
  id: string;
  type: string;
  subject: string | null;
  /** When the event was recorded, ISO 8601. */
  timestamp: string;
  data: unknown;
}

/** The worker cuts a webhook run this long after the HTTP deadline, so deliver() always reports first. */
export const WEBHOOK_RUN_GRACE_MS = 2_000;

/** After an abort, how long a delivery may still take to write its attempt log. */
const ABORT_WRITE_GRACE_MS = 1_000;

export const TEST_EVENT_TYPE = 'rea.endpoint.test';

/**
 * The `webhook-id` of a delivery: stable across its retries, new for a resend or replay (which
 * are new deliveries). The event id keeps it unique even across databases whose job ids collide.
 */
export function webhookIdFor(eventId: string, deliveryId: string): string {
  return `msg_${eventId.replaceAll('-', '')}_${deliveryId}`;
}

export function envelopeOf(event: Pick<StoredEvent, 'id' | 'type' | 'subject' | 'createdAt' | 'payload'>): WebhookEnvelope {
  const at = event.createdAt instanceof Date ? event.createdAt : new Date(event.createdAt);
  return { id: event.id, type: event.type, subject: event.subject, timestamp: at.toISOString(), data: event.payload };
}

/**
 * Statuses a gateway in front of the receiver (a reverse proxy, a load balancer) sends when the
 * receiver itself did not answer: 502 Bad Gateway (it could not reach it, or got no valid answer)
 * and 504 Gateway Timeout (it waited in vain). They are retried as any failure; for the
 * endpoint's state they count as no answer, like a timeout or a refused connection.
 */
export const GATEWAY_NO_ANSWER_STATUSES: readonly number[] = [502, 504];

/**
 * Whether the receiver itself answered a failed attempt, which decides how the failure moves the
 * endpoint (attemptRecord): one message a receiver refuses says nothing about the others, no
 * answer says the same about all of them. A 503 is both in practice, told apart by Retry-After:
 * with one rea reads ('throttled'), it is the receiver's own "come back then" (maintenance,
 * shedding load), as a 429 is, and counts as its answer; without one, it is most often a gateway
 * with no receiver behind it to send to (Envoy's "no healthy upstream", HAProxy's "no server is
 * available", a cloud load balancer without a healthy target), and counts as no answer. A
 * receiver's own bare 503 thus turns the endpoint failing at once: it says it is down for every
 * delivery, so holding them back is right; whereas a receiver shedding load with Retry-After
 * while others get through does not flap between failing and enabled.
 */
export function receiverAnswered(result: Pick<DeliveryResult, 'outcome' | 'status'>): boolean {
  if (result.status === undefined) return false;
  if (GATEWAY_NO_ANSWER_STATUSES.includes(result.status)) return false;
  return result.status !== 503 || result.outcome === 'throttled';
}

function healthOf(result: DeliveryResult): HealthEffect {
  if (result.outcome === 'success') return { effect: 'success' };
  if (result.outcome === 'gone') return { effect: 'gone', reason: 'the endpoint answered 410 Gone' };
  // A throttled or refused attempt did not deliver either: a failure, whose effect on the endpoint
  // depends on whether the receiver answered and on its last success (attemptRecord).
  return { effect: 'failure', answered: receiverAnswered(result) };
}

function stoppedByUs(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true && signal.reason instanceof WorkerStoppingError;
}

export interface WebhookDeps {
  lifecycle: Lifecycle;
  clock: Clock;
}

export interface AttemptSummary {
  webhookId: string;
  outcome: AttemptOutcome;
  status: number | null;
  durationMs: number;
  responseExcerpt: string;
  error: string | null;
  retryAfterMs: number | null;
}

/** Sign and send one envelope to one endpoint, write the attempt and its health effect, emit the signal. */
async function attempt(
  driver: Driver,
  settings: WebhookSettings,
  deps: WebhookDeps,
  p: {
    endpointId: string; url: string; secrets: string[]; envelope: WebhookEnvelope; webhookId: string;
    jobId: string | null; attempt: number; test: boolean; signal?: AbortSignal;
  },
): Promise<{ result: DeliveryResult; stateChangedTo: EndpointState | null }> {
  const body = JSON.stringify(p.envelope);
  const headers = signPayload({ msgId: p.webhookId, timestamp: Math.floor(appNow(deps.clock) / 1000), body, secrets: p.secrets });
  const result = await deliver({
    url: p.url, headers, body, signal: p.signal,
    allowPrivateNetworks: settings.allowPrivateNetworks, allowlist: settings.allowlist,
    timeoutMs: settings.timeoutMs, connectTimeoutMs: settings.connectTimeoutMs,
    maxResponseBytes: settings.maxResponseBytes, maxRetryAfterMs: settings.maxRetryAfterMs,
    resolve: settings.resolve, now: () => appNow(deps.clock),
  });
  const { stateChangedTo } = await driver.webhooks.attemptRecord({
    attempt: {
      jobId: p.jobId, endpointId: p.endpointId, eventId: p.envelope.id, webhookId: p.webhookId, attempt: p.attempt,
      status: result.status ?? null, durationMs: result.durationMs, outcome: result.outcome,
      responseExcerpt: result.responseExcerpt, error: result.error == null ? null : storable(result.error),
    },
    // An attempt this process cut short as it stopped says nothing about the endpoint.
    health: p.test || stoppedByUs(p.signal) ? { effect: 'none' } : healthOf(result),
    failingDelayMs: settings.failingDelayMs,
    now: deps.clock.now(),
  });
  deps.lifecycle.emit('webhook:attempt', {
    jobId: p.jobId, endpointId: p.endpointId, eventId: p.envelope.id, webhookId: p.webhookId, attempt: p.attempt,
    outcome: result.outcome, status: result.status ?? null, durationMs: result.durationMs, error: result.error ?? null,
  });
  if (stateChangedTo) {
    const reason = stateChangedTo === 'disabled' ? 'the endpoint answered 410 Gone' : stateChangedTo === 'failing' ? (result.error ?? 'delivery failed') : null;
    deps.lifecycle.emit('endpoint:state', { endpointId: p.endpointId, state: stateChangedTo, reason });
  }
  return { result, stateChangedTo };
}

export class WebhookChannel implements JobChannel {
  readonly kind = 'webhook' as const;

  constructor(
    private readonly driver: Driver,
    private readonly settings: WebhookSettings,
    private readonly deps: WebhookDeps,
  ) {}

  // One claim takes deliveries in due order across endpoints; the per-endpoint cap keeps an
  // endpoint that answers slowly (but answers) from taking every slot that claim offers: its
  // deliveries beyond the cap stay in the queue, unclaimed and uncounted, while the other
  // endpoints' go out. Held counts the claimed ones still waiting in the buffer too.
  claimTargets(free: number, running: (target?: string) => number, holding: () => ReadonlyMap<string, number>): ClaimTarget[] {
    const room = Math.min(free, this.settings.concurrency - running());
    if (room <= 0) return [];
    const held = [...holding()].map(([target, count]) => ({ target, count }));
    return [{
      kind: 'webhook', target: '*', limit: room, leaseMs: this.settings.leaseMs,
      perTarget: { limit: this.settings.concurrencyPerEndpoint, held },
    }];
  }

  canStart(job: ClaimedJob, running: (target?: string) => number): boolean {
    return running() < this.settings.concurrency && running(job.target) < this.settings.concurrencyPerEndpoint;
  }

  timeoutMs(): number {
    return this.settings.timeoutMs + WEBHOOK_RUN_GRACE_MS;
  }

  backoffMs(job: ClaimedJob): number {
    return webhookRetryDelayMs(attemptInAllowance(job, this.settings.maxAttempts), { maxAttempts: Number.MAX_SAFE_INTEGER }) ?? 0;
  }

  timeoutMessage(_job: ClaimedJob, timeoutMs: number): string {
    return `webhook delivery did not finish within ${timeoutMs} ms and was aborted`;
  }

  run(job: ClaimedJob, abort: JobAbort, log: LazyLogger): Promise<RunOutcome> {
    // Raced with the abort: the request itself stops on the signal, and the attempt log is then
    // written within ABORT_WRITE_GRACE_MS; but the endpoint read and that write are queries that
    // could hang on a lock, and the job's timeout and the worker's stop must still end the run
    // (the delivery is then retried: at least once).
    return abort.race(this.deliverJob(job, abort, log), ABORT_WRITE_GRACE_MS);
  }

  private async deliverJob(job: ClaimedJob, abort: JobAbort, log: LazyLogger): Promise<RunOutcome> {
    const endpoint = await this.driver.webhooks.endpointGetForDelivery({ id: job.target, now: this.deps.clock.now() });
    if (!endpoint) throw permanent(new Error(`endpoint ${job.target} no longer exists`));
    // Queued before its endpoint was disabled: the owner asked for silence; resend once it is enabled.
    if (endpoint.state === 'disabled') throw permanent(new Error(`endpoint ${job.target} is disabled`));
    // Queued before its eventTypes were narrowed: a receiver only ever gets the types it takes now
    // (resend and replay refuse the others); before, every queued retry still went out.
    if (!endpoint.eventTypes.some((p) => patternMatches(p, job.event.type))) {
      throw permanent(new Error(`endpoint ${job.target} no longer subscribes to '${job.event.type}'`));
    }
    const webhookId = webhookIdFor(job.event.id, job.id);
    const { result } = await attempt(this.driver, this.settings, this.deps, {
      endpointId: endpoint.id, url: endpoint.url, secrets: endpoint.secrets, envelope: envelopeOf(job.event),
      webhookId, jobId: job.id, attempt: job.attempt, test: false, signal: abort.signal,
    });
    const what = result.error ?? (result.status !== undefined ? `HTTP ${result.status}` : result.outcome);
    switch (result.outcome) {
      case 'success':
        return 'succeeded';
      case 'gone':
        log.warn({ endpoint_id: endpoint.id }, 'endpoint answered 410 Gone: disabled');
        throw permanent(new Error('HTTP 410 Gone: the endpoint was disabled'));
      case 'refused':
        throw permanent(new Error(what));
      case 'throttled': {
        // A throttled attempt counts like any other, so Retry-After may only push the next one
        // later than the attempt⁴ schedule, never sooner: a receiver answering "Retry-After: 0"
        // (or a past date) would otherwise spend every attempt within seconds and lose the delivery.
        const delayMs = Math.max(result.retryAfterMs ?? 0, this.backoffMs(job));
        throw retryAfter(delayMs, new Error(`HTTP ${result.status}; Retry-After ${Math.round((result.retryAfterMs ?? 0) / 1000)} s`));
      }
      default:
        throw new Error(what);
    }
  }
}

/**
 * `endpoints test`: one signed delivery of a test envelope, now, outside the queue. It goes to the
 * attempt log (without a delivery id) but never changes the endpoint's state.
 */
export async function sendTestDelivery(
  driver: Driver, settings: WebhookSettings, deps: WebhookDeps, endpointId: string,
): Promise<AttemptSummary | null> {
  const endpoint = await driver.webhooks.endpointGetForDelivery({ id: endpointId, now: deps.clock.now() });
  if (!endpoint) return null;
  const eventId = uuidv7();
  const envelope: WebhookEnvelope = {
    id: eventId, type: TEST_EVENT_TYPE, subject: null, timestamp: new Date(appNow(deps.clock)).toISOString(),
    data: { message: 'a test delivery from rea', endpointId },
  };
  const webhookId = `msg_test_${eventId.replaceAll('-', '')}`;
  const { result } = await attempt(driver, settings, deps, {
    endpointId, url: endpoint.url, secrets: endpoint.secrets, envelope, webhookId, jobId: null, attempt: 1, test: true,
  });
  return {
    webhookId, outcome: result.outcome, status: result.status ?? null, durationMs: result.durationMs,
    responseExcerpt: result.responseExcerpt, error: result.error ?? null, retryAfterMs: result.retryAfterMs ?? null,
  };
}
