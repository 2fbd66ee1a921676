// The endpoints API behind bus.endpoints, bus.deliveries and the webhook part of bus.events:
// validates input into typed errors, keeps secrets write-only, and makes new deliveries.
import type { Clock } from '../../core/clock.js';
import { BusStateError, NotFoundError, OptionsError, UnknownEventTypeError } from '../../core/errors.js';
import { storable } from '../../core/errors-format.js';
import { patternMatches } from '../../core/events.js';
import { pageOf, type Page } from '../../core/filters.js';
import { isJobId } from '../../core/job-id.js';
import { ENDPOINT_CHANGE_KEYS, ENDPOINT_INPUT_KEYS, NO_ENDPOINT_CHANGE, changesSomething } from '../../core/endpoint-input.js';
import { knownOptions, MAX_WINDOW_MS, rejectUnknownOptions } from '../../core/options.js';
import type { Lifecycle } from '../../core/lifecycle.js';
import { uuidv7 } from '../../core/uuid.js';
import type { Driver } from '../../driver/types.js';
import { ENDPOINT_STATES, type AttemptRow, type EndpointRow, type EndpointState } from '../../driver/webhooks.js';
import { assertUrlAllowed } from './address.js';
import { sendTestDelivery, webhookIdFor, type AttemptSummary, type WebhookSettings } from './channel.js';
import { generateSecret, secretHint, storedSecret } from './secret.js';

export type Endpoint = EndpointRow;
export type WebhookAttempt = AttemptRow;

/** What create and rotateSecret return: the endpoint plus its new secret, shown this once only. */
export type EndpointWithSecret = Endpoint & { secret: string };

export interface EndpointInput {
  url: string;
  /** Exact event types and `prefix.*` patterns; '*' for every event. */
  eventTypes: readonly string[];
  description?: string;
  /**
   * A Standard Webhooks secret (`whsec_` + base64 of ≥ 24 bytes, or that base64 alone: stored and
   * returned as `whsec_` + it); generated when omitted.
   */
  secret?: string;
}

export interface EndpointChanges {
  url?: string;
  eventTypes?: readonly string[];
  description?: string;
}

// Every key of the two types is known to the shared lists (a key added to a type and not there does not compile).
const INPUT_KEYS: Record<keyof EndpointInput, true> = ENDPOINT_INPUT_KEYS;
const CHANGE_KEYS: Record<keyof EndpointChanges, true> = ENDPOINT_CHANGE_KEYS;
const LIST_KEYS: Record<keyof EndpointListFilter, true> = { state: true, limit: true, after: true };
const ATTEMPT_KEYS = { limit: true, before: true } as const;

export interface NewDelivery {
  deliveryId: string;
  webhookId: string;
  eventId: string;
  endpointId: string;
}

export interface EndpointListFilter {
  state?: EndpointState;
  /** 1–1000, default 1000. */
  limit?: number;
  /** The last id of the page before (a page's `nextCursor`). */
  after?: string;
}

export interface EndpointsApi {
  create(input: EndpointInput): Promise<EndpointWithSecret>;
  /**
   * Oldest first, at most `limit` (1–1000, default 1000). A full page may have more after it:
   * ask again with `after` = its last id (or use page(), which says whether there is more).
   */
  list(filter?: EndpointListFilter): Promise<Endpoint[]>;
  /** As list(), with `nextCursor`: the `after` of the next page, null when no endpoint follows. */
  page(filter?: EndpointListFilter): Promise<Page<Endpoint>>;
  get(id: string): Promise<Endpoint | null>;
  update(id: string, changes: EndpointChanges): Promise<Endpoint>;
  /** The owner's act after fixing the receiver: state enabled, failing and disabled fields cleared. One already enabled is left as it is (no endpoint:state). */
  enable(id: string): Promise<Endpoint>;
  /** No new deliveries are enqueued; queued ones are discarded when they come up. One already disabled keeps its first time and reason. */
  disable(id: string, options?: { reason?: string }): Promise<Endpoint>;
  /**
   * A new secret signs from now on (`secret`, as create takes it, or a generated one); the previous
   * ones (the newest 3 at most) keep signing for `graceMs` (default webhooks.secretGraceMs).
   */
  rotateSecret(id: string, options?: { secret?: string; graceMs?: number }): Promise<EndpointWithSecret>;
  /** Delete it with its secrets and cancel its waiting deliveries (how many: `cancelled`); null when there is no such endpoint. */
  delete(id: string): Promise<{ cancelled: number } | null>;
  /** The endpoint's attempt log, newest first. */
  attempts(id: string, options?: { limit?: number; before?: string }): Promise<WebhookAttempt[]>;
  /**
   * As attempts(), with `nextCursor` (the `before` of the next page, null when no older attempt
   * remains). The log outlives a deleted endpoint; an id that names neither an endpoint nor any
   * attempt is a NotFoundError, not an empty page that hides a typo.
   */
  attemptPage(id: string, options?: { limit?: number; before?: string }): Promise<Page<WebhookAttempt>>;
  /**
   * One signed test delivery now, outside the queue; logged as an attempt, never changes the endpoint's
   * state. A disabled endpoint (even one its own 410 disabled) gets it too: that is how its owner
   * tries a fixed receiver before enabling it again.
   */
  test(id: string): Promise<AttemptSummary>;
}

export interface DeliveriesApi {
  /** Send a delivery's event to its endpoint again, as a new delivery (new webhook-id). */
  resend(deliveryId: string): Promise<NewDelivery>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const PATTERN = /^[A-Za-z0-9_.:*-]{1,200}$/;
const MAX_PATTERNS = 100;
const MAX_URL = 2048;
const MAX_DESCRIPTION = 1000;
const MAX_LIST = 1000;

export function createWebhookApi(
  driver: Driver,
  settings: WebhookSettings,
  deps: { lifecycle: Lifecycle; clock: Clock; knownTypes: readonly string[]; onJobsInserted: () => void },
) {
  const w = driver.webhooks;
  const now = () => deps.clock.now();
  const policy = { allowPrivateNetworks: settings.allowPrivateNetworks, allowlist: settings.allowlist };

  const checkUrl = (field: string, url: unknown): string => {
    if (typeof url !== 'string' || url.length === 0) throw new OptionsError(field, 'must be an http(s) URL');
    if (url.length > MAX_URL) throw new OptionsError(field, `is ${url.length} characters; at most ${MAX_URL}`);
    // Throws WebhookUrlRefusedError for a bad scheme, credentials or a refused literal address.
    return assertUrlAllowed(url, policy).url.toString();
  };

  const checkPatterns = (field: string, list: unknown): string[] => {
    if (!Array.isArray(list) || list.length === 0) throw new OptionsError(field, "give at least one event type or pattern ('order.*', '*')");
    if (list.length > MAX_PATTERNS) throw new OptionsError(field, `at most ${MAX_PATTERNS} patterns`);
    const out: string[] = [];
    for (const [i, p] of list.entries()) {
      if (typeof p !== 'string' || !PATTERN.test(p)) throw new OptionsError(`${field}[${i}]`, 'must be an event type or pattern of letters, digits, _ . : - and *');
      // A bus that knows its catalog catches typos; an admin bus (the CLI) knows no types and cannot.
      if (deps.knownTypes.length > 0 && !deps.knownTypes.some((t) => patternMatches(p, t))) throw new UnknownEventTypeError(p, deps.knownTypes);
      if (!out.includes(p)) out.push(p);
    }
    return out;
  };

  const checkDescription = (field: string, d: unknown): string => {
    if (typeof d !== 'string') throw new OptionsError(field, 'must be a string');
    if (d.length > MAX_DESCRIPTION) throw new OptionsError(field, `at most ${MAX_DESCRIPTION} characters`);
    if (storable(d) !== d) throw new OptionsError(field, 'must not contain a NUL character or a lone UTF-16 surrogate (not storable as text)');
    return d;
  };

  const checkId = (id: unknown): string => {
    if (typeof id !== 'string' || !UUID.test(id)) throw new NotFoundError(`endpoint ${JSON.stringify(id)}`);
    return id;
  };

  const found = <T>(row: T | null, id: string): T => {
    if (!row) throw new NotFoundError(`endpoint ${id}`);
    return row;
  };

  // WebhookSecretError names the problem, never the secret.
  const newSecret = (given: unknown): string => (given === undefined ? generateSecret() : storedSecret(given));

  const stateChanged = (row: Endpoint, reason: string | null) =>
    deps.lifecycle.emit('endpoint:state', { endpointId: row.id, state: row.state, reason });

  /**
   * A new delivery of an event to an endpoint: what replay and resend both come to, so both check
   * here. `field` names the caller's input in the error for an endpoint that does not subscribe.
   */
  async function deliverAgain(eventId: string, endpointId: string, field: string): Promise<NewDelivery> {
    const event = await driver.executor.eventGet({ id: eventId });
    if (!event) throw new NotFoundError(`event ${eventId}`);
    const endpoint = found(await w.endpointGet({ id: endpointId }), endpointId);
    // A receiver should only ever see the types it subscribes to now, replays and resends included:
    // an endpoint whose eventTypes were narrowed since the first delivery does not get it again.
    if (!endpoint.eventTypes.some((p) => patternMatches(p, event.type))) {
      throw new OptionsError(field, `endpoint ${endpointId} does not subscribe to '${event.type}' (it takes ${endpoint.eventTypes.join(', ')})`);
    }
    if (endpoint.state === 'disabled') throw new BusStateError(`endpoint ${endpointId} is disabled; enable it before sending to it again`);
    const deliveryId = await w.webhookJobInsert({
      eventId, endpointId, job: { maxAttempts: settings.maxAttempts, leaseMs: settings.leaseMs }, now: now(),
    });
    if (!deliveryId) throw new NotFoundError(`event ${eventId} (deleted by retention?)`);
    deps.onJobsInserted();
    return { deliveryId, webhookId: webhookIdFor(eventId, deliveryId), eventId, endpointId };
  }

  // One row more than asked: its presence says a next page exists (a full page alone does not).
  async function endpointPage(name: string, filter: EndpointListFilter): Promise<Page<Endpoint>> {
    if (!filter || typeof filter !== 'object') throw new OptionsError(`${name}(filter)`, 'pass { state?, limit?, after? }');
    rejectUnknownOptions(filter, LIST_KEYS, `${name}(filter)`);
    const state = filter.state ?? null;
    if (state !== null && !ENDPOINT_STATES.includes(state)) throw new OptionsError(`${name}.state`, `must be one of ${ENDPOINT_STATES.join(', ')}`);
    const limit = filter.limit ?? MAX_LIST;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST) throw new OptionsError(`${name}.limit`, `must be an integer in 1–${MAX_LIST}`);
    const after = filter.after ?? null;
    if (after !== null && (typeof after !== 'string' || !UUID.test(after))) throw new OptionsError(`${name}.after`, 'must be an endpoint id (the last one of the page before)');
    return pageOf(await w.endpointList({ state, limit: limit + 1, after }), limit);
  }

  const endpoints: EndpointsApi = {
    async create(input) {
      if (!input || typeof input !== 'object') throw new OptionsError('endpoints.create(input)', 'pass { url, eventTypes, description?, secret? }');
      rejectUnknownOptions(input, INPUT_KEYS, 'endpoints.create(input)');
      const url = checkUrl('endpoints.create.url', input.url);
      const eventTypes = checkPatterns('endpoints.create.eventTypes', input.eventTypes);
      const description = checkDescription('endpoints.create.description', input.description ?? '');
      const secret = newSecret(input.secret);
      const row = await w.endpointInsert({
        id: uuidv7(), url, description, eventTypes,
        secret, secretHint: secretHint(secret), now: now(),
      });
      return { ...row, secret };
    },

    async list(filter = {}) {
      return (await endpointPage('endpoints.list', filter)).items;
    },

    page(filter = {}) {
      return endpointPage('endpoints.page', filter);
    },

    async get(id) {
      if (typeof id !== 'string' || !UUID.test(id)) return null;
      return w.endpointGet({ id });
    },

    async update(id, changes) {
      checkId(id);
      if (!changes || typeof changes !== 'object') throw new OptionsError('endpoints.update(changes)', 'pass { url?, eventTypes?, description? }');
      // A misspelt key (eventType) or none at all changed nothing, yet resolved and bumped updatedAt.
      rejectUnknownOptions(changes, CHANGE_KEYS, 'endpoints.update(changes)');
      if (!changesSomething(changes)) throw new OptionsError('endpoints.update(changes)', NO_ENDPOINT_CHANGE);
      const eventTypes = changes.eventTypes === undefined ? null : checkPatterns('endpoints.update.eventTypes', changes.eventTypes);
      return found(await w.endpointUpdate({
        id,
        url: changes.url === undefined ? null : checkUrl('endpoints.update.url', changes.url),
        description: changes.description === undefined ? null : checkDescription('endpoints.update.description', changes.description),
        eventTypes, now: now(),
      }), id);
    },

    async enable(id) {
      checkId(id);
      const row = await w.endpointSetState({ id, state: 'enabled', reason: null, now: now() });
      // Already enabled with nothing to clear: nothing changed, so no endpoint:state (before, every
      // enable emitted one, and a listener saw a state change that never happened).
      if (!row) return found(await w.endpointGet({ id }), id);
      stateChanged(row, null);
      return row;
    },

    async disable(id, options = {}) {
      checkId(id);
      knownOptions(options, { reason: true }, 'endpoints.disable(options)');
      const reason = options.reason === undefined ? 'disabled by its owner' : checkDescription('endpoints.disable.reason', options.reason);
      const row = await w.endpointSetState({ id, state: 'disabled', reason, now: now() });
      // Already disabled: it keeps the time and reason of the first disable.
      if (!row) return found(await w.endpointGet({ id }), id);
      stateChanged(row, reason);
      return row;
    },

    async rotateSecret(id, options = {}) {
      checkId(id);
      // A misspelt graceMS kept the old secret signing for the default day.
      knownOptions(options, { secret: true, graceMs: true }, 'endpoints.rotateSecret(options)');
      const graceMs = options.graceMs ?? settings.secretGraceMs;
      // Bounded like webhooks.secretGraceMs: a longer grace overflowed the expiry timestamp in SQL,
      // and the rotation failed with PostgreSQL's "interval out of range" instead of a named error.
      if (!Number.isInteger(graceMs) || graceMs < 0 || graceMs > MAX_WINDOW_MS) {
        throw new OptionsError('endpoints.rotateSecret.graceMs', `must be an integer from 0 to ${MAX_WINDOW_MS} (ms, 100 years), got ${graceMs}`);
      }
      const secret = newSecret(options.secret);
      const row = found(await w.endpointRotateSecret({ id, secret, secretHint: secretHint(secret), graceMs, now: now() }), id);
      return { ...row, secret };
    },

    async delete(id) {
      if (typeof id !== 'string' || !UUID.test(id)) return null;
      return w.endpointDelete({ id, now: now() });
    },

    async attempts(id, options = {}) {
      checkId(id);
      knownOptions(options, ATTEMPT_KEYS, 'endpoints.attempts(options)');
      return w.attemptList({ endpointId: id, eventId: null, beforeId: checkBefore(options.before), limit: checkLimit(options.limit) });
    },

    async attemptPage(id, options = {}) {
      checkId(id);
      knownOptions(options, ATTEMPT_KEYS, 'endpoints.attemptPage(options)');
      const beforeId = checkBefore(options.before);
      const limit = checkLimit(options.limit);
      // One row more than asked: its presence says an older page exists.
      const page = pageOf(await w.attemptList({ endpointId: id, eventId: null, beforeId, limit: limit + 1 }), limit);
      // An empty page past the last attempt (a cursor) is a page all the same when the log exists.
      if (page.items.length === 0 && !(await endpoints.get(id))
        && (beforeId === null || (await w.attemptList({ endpointId: id, eventId: null, beforeId: null, limit: 1 })).length === 0)) {
        throw new NotFoundError(`endpoint ${id}`);
      }
      return page;
    },

    async test(id) {
      checkId(id);
      return found(await sendTestDelivery(driver, settings, deps, id), id);
    },
  };

  const deliveries: DeliveriesApi = {
    async resend(deliveryId) {
      if (!isJobId(deliveryId)) throw new NotFoundError(`delivery ${JSON.stringify(deliveryId)}`);
      const job = await w.webhookJobGet({ jobId: deliveryId });
      if (!job) throw new NotFoundError(`delivery ${deliveryId}`);
      return deliverAgain(job.eventId, job.endpointId, 'deliveries.resend(deliveryId)');
    },
  };

  return {
    endpoints,
    deliveries,
    /** bus.events.replay: the event to one endpoint again, as a new delivery. */
    async replay(eventId: string, options: { endpointId: string }): Promise<NewDelivery> {
      if (typeof eventId !== 'string' || !UUID.test(eventId)) throw new NotFoundError(`event ${JSON.stringify(eventId)}`);
      if (!options || typeof options !== 'object') throw new OptionsError('events.replay(options)', 'pass { endpointId }');
      rejectUnknownOptions(options, { endpointId: true }, 'events.replay(options)');
      return deliverAgain(eventId, checkId(options.endpointId), 'events.replay.endpointId');
    },
    /** bus.events.attempts: every webhook attempt made for one event, newest first. */
    async attemptsForEvent(eventId: string, options: { limit?: number; before?: string } = {}): Promise<WebhookAttempt[]> {
      knownOptions(options, ATTEMPT_KEYS, 'events.attempts(options)');
      if (typeof eventId !== 'string' || !UUID.test(eventId)) return [];
      return w.attemptList({ endpointId: null, eventId, beforeId: checkBefore(options.before), limit: checkLimit(options.limit) });
    },
  };
}

function checkLimit(limit: number | undefined): number {
  const n = limit ?? 100;
  if (!Number.isInteger(n) || n < 1 || n > MAX_LIST) throw new OptionsError('attempts.limit', `must be an integer in 1–${MAX_LIST}`);
  return n;
}

function checkBefore(before: string | undefined): string | null {
  if (before === undefined) return null;
  if (!isJobId(before)) throw new OptionsError('attempts.before', 'must be an attempt id');
  return before;
}
