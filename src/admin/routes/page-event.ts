// GET /events/:id: one event with payload, trace id, state, its jobs and its delivery attempts.
import { nameAndMessage } from '../../core/errors-format.js';
import { plural } from '../../core/format.js';
import { loadEvent } from '../data.js';
import { actionButton, badge, duration, html, lastJobError, layout, prettyJson, table, time } from '../html.js';
import { defineRoute } from '../route.js';

export default defineRoute({
  method: 'GET', path: '/events/:id', access: 'user', kind: 'page',
  async handle(ctx) {
    const p = ctx.page;
    const { event: e, jobs, attempts } = await loadEvent(ctx.bus, ctx.params.id);
    const state = e.poisonedAt ? 'poisoned' : e.fannedOutAt ? 'fanned' : 'unfanned';
    const here = `/events/${e.id}`;
    // A handler the event was delivered to runs on it again as a new job (events.replay with a handler).
    const runAgain = (handler: string) => actionButton(p, `/api/events/${e.id}/replay`, 'Run again', {
      fields: { handler }, returnTo: here, confirm: `Run handler ${handler} on this event again?`,
    });
    const jobRows = jobs.map((j) => [
      html`<code>${j.id}</code>`, j.kind, html`<code>${j.target}</code>`, badge(j.state), `${j.attempt}/${j.maxAttempts}`,
      time(j.finalizedAt ?? j.attemptedAt ?? j.scheduledAt),
      lastJobError(j),
      html`${jobActions(p, j.id, j.state, here)}${j.kind === 'handler' && j.state === 'completed' ? runAgain(j.target) : ''}`,
    ]);
    const attemptRows = attempts.map((a) => [
      time(a.at), html`<a href="${p.base}/endpoints/${a.endpointId}"><code>${a.endpointId.slice(0, 8)}</code></a>`, a.attempt, badge(a.outcome),
      a.status ?? '-', duration(a.durationMs), html`<code class="preview">${a.error ?? a.responseExcerpt}</code>`,
    ]);
    const errors = jobs.flatMap((j) => j.errors.map((err) => ({ job: j.id, target: j.target, ...err })));
    const body = html`<h1>Event <code>${e.type}</code></h1>
<dl>
<dt>Id</dt><dd><code>${e.id}</code></dd>
<dt>State</dt><dd>${badge(state)}${e.fanAttempts ? html` <span class="muted">after ${plural(e.fanAttempts, 'fan-out attempt')}</span>` : ''}</dd>
<dt>Subject</dt><dd>${e.subject ?? '-'}</dd>
<dt>Trace id</dt><dd><a href="${p.base}/events?traceId=${encodeURIComponent(e.traceId ?? '')}"><code>${e.traceId ?? ''}</code></a></dd>
<dt>Recorded</dt><dd>${time(e.createdAt)} ${e.createdBy ? html`by ${e.createdBy}` : ''}</dd>
<dt>Fanned out</dt><dd>${time(e.fannedOutAt)}</dd>
${e.deliveredInline.length ? html`<dt>Delivered inline</dt><dd>${e.deliveredInline.map((h, i) => html`${i ? ', ' : ''}<code>${h}</code> ${runAgain(h)}`)} <span class="muted">(run in the relay's round at the first attempt; no job row)</span></dd>` : ''}
<dt>Version</dt><dd>${e.version}</dd>
</dl>
${e.lastError ? html`<h2>Last fan-out error</h2><pre class="err">${e.lastError}</pre>` : ''}
<div class="actions">${e.poisonedAt ? actionButton(p, '/api/events/requeue', 'Requeue this event', { fields: { ids: e.id }, kind: 'primary', returnTo: here, confirm: 'Requeue this poisoned event?' }) : ''}</div>
<h2>Payload</h2>
<pre id="payload">${prettyJson(e.payload)}</pre>
<h2>Jobs</h2>
${table(['Job', 'Kind', 'Target', 'State', 'Attempt', 'When', 'Last error', ''], jobRows, e.deliveredInline.length ? 'No jobs: every delivery succeeded inline.' : 'No jobs (not fanned out yet, or no subscriber).')}
<h2>Delivery attempts</h2>
${table(['When', 'Endpoint', 'Attempt', 'Outcome', 'HTTP', 'Took', 'Response / error'], attemptRows, 'No webhook deliveries.')}
${errors.length ? html`<h2>Job errors</h2>${table(['Job', 'Target', 'Attempt', 'At', 'Error'], errors.map((x) => [x.job, html`<code>${x.target}</code>`, x.attempt, time(x.at), html`<code>${nameAndMessage(x.name, x.message)}</code>`]))}` : ''}`;
    return { html: layout(p, `Event ${e.type}`, body) };
  },
});

export function jobActions(p: Parameters<typeof actionButton>[0], id: string, state: string, returnTo: string) {
  if (state === 'discarded' || state === 'cancelled') return actionButton(p, '/api/jobs/retry', 'Retry', { fields: { ids: id }, kind: 'primary', returnTo });
  if (state === 'available' || state === 'retryable') {
    return html`${actionButton(p, '/api/jobs/cancel', 'Cancel', { fields: { ids: id }, returnTo, confirm: 'Cancel this job?' })}${actionButton(p, '/api/jobs/discard', 'Discard', { fields: { ids: id }, kind: 'danger', returnTo, confirm: 'Move this job to the dead letters?' })}`;
  }
  return '';
}
