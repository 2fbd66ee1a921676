// The webhook statements of the PostgreSQL and PGlite drivers, named after the WebhookExecutor
// method that runs each. `s` is the already-quoted schema; time comes in as coalesce($now, now()).
import { isoTime } from './sql-time.js';

/** Deliveries an attempt moves out (a failure) or back (a recovery) at most: see attemptRecord. */
export const ENDPOINT_MOVE_BATCH = 1000;

/**
 * A success notes its time on the endpoint (last_success_at) only once the noted time is older
 * than failingDelayMs divided by this: a healthy endpoint's row is written once every 30 s at most
 * (the default 5 min / 10), not at every delivery, and the time a failure compares with is at most
 * that much behind the real last success.
 */
export const SUCCESS_NOTE_DIVISOR = 10;

/**
 * Previous secrets an endpoint keeps after a rotation, newest first: each is one more signature on
 * every request while it lasts, so rotating again and again within one grace period must not grow
 * that list (and the set of secrets that verify) without end. The oldest beyond it stops at once.
 */
export const MAX_PREVIOUS_SECRETS = 3;

// Every read of an endpoint selects exactly these columns: `secrets` is never among them.
const ENDPOINT_COLUMNS = /* sql */ `id::text as id, url, description, event_types, state, failing_since, last_success_at,
  disabled_at, disabled_reason, secret_hint, created_at, updated_at`;

const ATTEMPT_COLUMNS = /* sql */ `id::text as id, job_id::text as delivery_id, endpoint_id::text as endpoint_id,
  event_id::text as event_id, webhook_id, attempt, at, status, duration_ms, outcome, response_excerpt, error`;

// A secret entry is active while it has no expiry or its expiry is still ahead.
const ACTIVE = (now: string) => `(x->>'expires_at' is null or (x->>'expires_at')::timestamptz > ${now})`;

export function webhookStatements(s: string) {
  return {
    endpointInsert: /* sql */ `
insert into ${s}.endpoints (id, url, description, event_types, like_patterns, secrets, secret_hint, created_at, updated_at)
values ($1::uuid, $2, $3, $4::text[], $5::text[],
        jsonb_build_array(jsonb_build_object('secret', $6::text, 'created_at', coalesce($8::timestamptz, now()), 'expires_at', null)),
        $7, coalesce($8::timestamptz, now()), coalesce($8::timestamptz, now()))
returning ${ENDPOINT_COLUMNS}`,

    // Keyset pages by id: UUIDv7, so creation order, and the primary key walks it. Every list
    // orders by the table's column (ep.id): a bare `order by id` names the output column, the
    // id::text of the select list, which sorts as text and no index walks.
    endpointList: /* sql */ `
select ${ENDPOINT_COLUMNS} from ${s}.endpoints ep
where ($1::text is null or state = $1::text) and ($3::uuid is null or id > $3::uuid)
order by ep.id
limit $2`,

    endpointGet: /* sql */ `
select ${ENDPOINT_COLUMNS} from ${s}.endpoints where id = $1::uuid`,

    endpointUpdate: /* sql */ `
update ${s}.endpoints
set url = coalesce($2, url),
    description = coalesce($3, description),
    event_types = coalesce($4::text[], event_types),
    like_patterns = coalesce($5::text[], like_patterns),
    updated_at = coalesce($6::timestamptz, now())
where id = $1::uuid
returning ${ENDPOINT_COLUMNS}`,

    // Enabling is a fresh start: failing and disabled fields are cleared. Disabling an endpoint
    // that is already disabled changes nothing (no row comes back): the first time and reason,
    // the health pass's or a person's, say why deliveries stopped. Nor does enabling one that is
    // already enabled with nothing to clear: no state changed, so no endpoint:state either.
    endpointSetState: /* sql */ `
update ${s}.endpoints
set state = $2::text,
    failing_since = case when $2::text = 'enabled' then null else failing_since end,
    disabled_at = case when $2::text = 'enabled' then null else coalesce($4::timestamptz, now()) end,
    disabled_reason = case when $2::text = 'enabled' then null else $3::text end,
    updated_at = coalesce($4::timestamptz, now())
where id = $1::uuid
  and not ($2::text = 'disabled' and state = 'disabled')
  and not ($2::text = 'enabled' and state = 'enabled' and failing_since is null and disabled_at is null)
returning ${ENDPOINT_COLUMNS}`,

    // The new secret goes first; secrets still active stay valid until now + grace at the latest;
    // expired ones are dropped, and of the active ones only the newest MAX_PREVIOUS_SECRETS are
    // kept (the list is newest first): before, each rotation within one grace period added one
    // more secret that verified, and one more signature to every request, without a bound.
    endpointRotateSecret: /* sql */ `
update ${s}.endpoints
set secrets = jsonb_build_array(jsonb_build_object('secret', $2::text, 'created_at', coalesce($5::timestamptz, now()), 'expires_at', null))
      || coalesce((
        select jsonb_agg(
                 case when x->>'expires_at' is null
                        or (x->>'expires_at')::timestamptz > coalesce($5::timestamptz, now()) + $4::double precision * interval '1 millisecond'
                      then jsonb_set(x, '{expires_at}', to_jsonb(coalesce($5::timestamptz, now()) + $4::double precision * interval '1 millisecond'))
                      else x end
                 order by ord)
        from (
          select x, ord from jsonb_array_elements(secrets) with ordinality as t(x, ord)
          where ${ACTIVE('coalesce($5::timestamptz, now())')}
          order by ord
          limit ${MAX_PREVIOUS_SECRETS}
        ) kept
      ), '[]'::jsonb),
    secret_hint = $3,
    updated_at = coalesce($5::timestamptz, now())
where id = $1::uuid
returning ${ENDPOINT_COLUMNS}`,

    // Its waiting deliveries are cancelled with it (they could only be discarded when they came up,
    // raising jobs_discarded for a deliberate act); a delivery running now finds no endpoint and fails.
    endpointDelete: /* sql */ `
with gone as (
  delete from ${s}.endpoints where id = $1::uuid returning id
), cancelled as (
  update ${s}.jobs
  set state = 'cancelled', finalized_at = coalesce($2::timestamptz, now()), lease_expires_at = null,
      errors = errors || jsonb_build_array(jsonb_build_object(
        'at', ${isoTime('coalesce($2::timestamptz, now())')}, 'attempt', attempt, 'name', 'EndpointDeleted',
        'message', 'cancelled: its endpoint was deleted'))
  where kind = 'webhook' and target = $1::uuid::text and state in ('available', 'retryable')
    and exists (select 1 from gone)
  returning 1
)
select (select count(*) from gone)::int as deleted, (select count(*) from cancelled)::int as cancelled`,

    endpointGetForDelivery: /* sql */ `
select id::text as id, url, state, event_types,
       coalesce((select jsonb_agg(x->>'secret' order by ord)
                 from jsonb_array_elements(secrets) with ordinality as t(x, ord)
                 where ${ACTIVE('coalesce($2::timestamptz, now())')}), '[]'::jsonb) as secrets
from ${s}.endpoints where id = $1::uuid`,

    endpointDisableFailing: /* sql */ `
with due as (
  select id from ${s}.endpoints
  where state = 'failing'
    and failing_since <= coalesce($3::timestamptz, now()) - $1::double precision * interval '1 millisecond'
  order by failing_since
  limit $4
  for update skip locked
)
update ${s}.endpoints e
set state = 'disabled', disabled_at = coalesce($3::timestamptz, now()), disabled_reason = $2,
    updated_at = coalesce($3::timestamptz, now())
from due
where e.id = due.id
returning e.id::text as id`,

    // The attempt row and the endpoint's health move together. The endpoint row is only written
    // when its state really changes, or (noted) when a success's time is worth noting again (see
    // SUCCESS_NOTE_DIVISOR), so a healthy endpoint costs no update per delivery; one that was
    // disabled meanwhile (by its owner or the health pass) stays disabled.
    //
    // A failure the receiver answered ($15, the channel's receiverAnswered: a 4xx, 429, 500…)
    // turns the endpoint failing only when no delivery to it succeeded in the last failingDelayMs:
    // the endpoint is up, and one message it refuses says nothing about the others. Before, every
    // failure of one bad message (400 to it, 200 to all others) turned the endpoint failing and
    // held every other delivery failingDelayMs out, again at each of its retries. A failure with
    // no answer (a timeout, a connection or DNS error, a refused address, and a 502, a 504 or a
    // 503 without Retry-After: a gateway in front saying the receiver did not answer) still turns
    // it failing at once: the receiver is down for every delivery, not refusing one, and a
    // timeout costs a slot each, up to the whole timeout, for every delivery behind it. So
    // does any failure of an endpoint that never succeeded. An endpoint that fails everything is
    // failing by the first failure after its last success is failingDelayMs old, and disabled
    // disableAfterMs after that, as before.
    //
    // A failed attempt that leaves the endpoint failing also moves its other deliveries that are
    // due now to failingDelayMs ($14) out, as its new ones are while it fails: claims go in order
    // of due time across endpoints, so the backlog of one that hangs held every webhook slot (each for the whole HTTP
    // timeout) and the other endpoints' deliveries waited behind it. Each later failure moves what
    // has come due since, so a failing endpoint gets a probe's worth of slots, not its backlog's.
    // A moved delivery keeps the time it was moved to in held_until (so does one fanned out while
    // the endpoint fails), and a success that makes the endpoint enabled again brings back to now
    // only those whose scheduled_at is still that: a delivery waiting for its own backoff or
    // Retry-After keeps its time. Before, every delivery due within failingDelayMs was brought
    // back, and a receiver that asked for 120 s got the retry at the next success of another
    // delivery. A held delivery was due when it was moved (or made), so now is never earlier than
    // its own schedule; once it is claimed, any retry is scheduled after held_until, never on it.
    // Up to ENDPOINT_MOVE_BATCH rows each way per attempt, through jobs_claim_idx.
    attemptRecord: /* sql */ `
with attempt as (
  insert into ${s}.webhook_attempts
    (job_id, endpoint_id, event_id, webhook_id, attempt, at, status, duration_ms, outcome, response_excerpt, error)
  values ($1::bigint, $2::uuid, $3::uuid, $4, $5, coalesce($12::timestamptz, now()), $6, $7, $8, $9, $10)
  returning 1
), health as (
  update ${s}.endpoints e
  set state = case $11::text when 'success' then 'enabled' when 'failure' then 'failing' else 'disabled' end,
      failing_since = case $11::text when 'success' then null
                                     when 'failure' then coalesce(e.failing_since, coalesce($12::timestamptz, now()))
                                     else e.failing_since end,
      last_success_at = case when $11::text = 'success' then coalesce($12::timestamptz, now()) else e.last_success_at end,
      disabled_at = case when $11::text = 'gone' then coalesce($12::timestamptz, now()) else e.disabled_at end,
      disabled_reason = case when $11::text = 'gone' then $13::text else e.disabled_reason end,
      updated_at = coalesce($12::timestamptz, now())
  where e.id = $2::uuid
    and e.state <> 'disabled'
    and case $11::text when 'success' then e.state <> 'enabled' or e.failing_since is not null
                       when 'failure' then e.state <> 'failing'
                         and ($15::boolean is not true or e.last_success_at is null
                              or e.last_success_at <= coalesce($12::timestamptz, now()) - $14::double precision * interval '1 millisecond')
                       when 'gone' then true
                       else false end
  returning e.state
), noted as (
  -- A success that changed no state: health wrote nothing (it runs first, as this reads it).
  update ${s}.endpoints e
  set last_success_at = coalesce($12::timestamptz, now())
  where e.id = $2::uuid and $11::text = 'success' and e.state = 'enabled' and $14::double precision > 0
    and (e.last_success_at is null
         or e.last_success_at <= coalesce($12::timestamptz, now()) - $14::double precision / ${SUCCESS_NOTE_DIVISOR} * interval '1 millisecond')
    and not exists (select 1 from health)
  returning 1
), moved_out as (
  update ${s}.jobs j
  set scheduled_at = coalesce($12::timestamptz, now()) + $14::double precision * interval '1 millisecond',
      held_until = coalesce($12::timestamptz, now()) + $14::double precision * interval '1 millisecond'
  from (
    select id from ${s}.jobs
    where $11::text = 'failure' and $14::double precision > 0
      and (exists (select 1 from health where health.state = 'failing')
           or exists (select 1 from ${s}.endpoints where id = $2::uuid and state = 'failing'))
      and kind = 'webhook' and target = $2::uuid::text and state in ('available', 'retryable')
      and scheduled_at <= coalesce($12::timestamptz, now())
    order by priority, scheduled_at, id
    limit ${ENDPOINT_MOVE_BATCH}
    for update skip locked
  ) due
  where j.id = due.id
  returning 1
), brought_back as (
  update ${s}.jobs j
  set scheduled_at = coalesce($12::timestamptz, now()), held_until = null
  from (
    select id from ${s}.jobs
    where $11::text = 'success' and kind = 'webhook' and target = $2::uuid::text and state in ('available', 'retryable')
      and scheduled_at > coalesce($12::timestamptz, now())
      and scheduled_at <= coalesce($12::timestamptz, now()) + $14::double precision * interval '1 millisecond'
      and scheduled_at = held_until
    order by priority, scheduled_at, id
    limit ${ENDPOINT_MOVE_BATCH}
    for update skip locked
  ) moved
  where j.id = moved.id and exists (select 1 from health where health.state = 'enabled')
  returning 1
)
select (select state from health) as state_changed_to, (select count(*) from attempt)::int as written,
       (select count(*) from moved_out)::int as moved_out, (select count(*) from brought_back)::int as brought_back`,

    // Newest first by the bigint column (a.id): the output column id is text, by which attempt 10
    // sorted before attempt 9, and the keyset's `id < $2` (the column) then skipped the newest.
    attemptListForEndpoint: /* sql */ `
select ${ATTEMPT_COLUMNS} from ${s}.webhook_attempts a
where endpoint_id = $1::uuid and ($2::bigint is null or id < $2::bigint)
order by a.id desc limit $3`,

    attemptListForEvent: /* sql */ `
select ${ATTEMPT_COLUMNS} from ${s}.webhook_attempts a
where event_id = $1::uuid and ($2::bigint is null or id < $2::bigint)
order by a.id desc limit $3`,

    attemptDeleteOlder: /* sql */ `
with old as (
  select id from ${s}.webhook_attempts
  where at < coalesce($2::timestamptz, now()) - $1::double precision * interval '1 millisecond'
  order by at
  limit $3
), gone as (
  delete from ${s}.webhook_attempts a using old where a.id = old.id returning 1
)
select count(*)::int as n from gone`,

    // The event is locked (for key share): an events retention pass then either sees this job
    // waiting or has deleted the event, and nothing is inserted (see retentionLockEvents).
    webhookJobInsert: /* sql */ `
insert into ${s}.jobs (event_id, kind, target, max_attempts, lease_ms, priority, coalesced, scheduled_at)
select e.id, 'webhook', ep.id::text, $3, $4, 0, 1, coalesce($5::timestamptz, now())
from ${s}.events e, ${s}.endpoints ep
where e.id = $1::uuid and ep.id = $2::uuid
for key share of e
returning id::text as id`,

    webhookJobGet: /* sql */ `
select event_id::text as event_id, target from ${s}.jobs where id = $1::bigint and kind = 'webhook'`,
  };
}

export type WebhookStatements = ReturnType<typeof webhookStatements>;
