// GET /endpoints/:id: one endpoint, its actions, a form to edit it and its attempt log (status,
// duration, excerpt).
import { redactUrl } from '../../core/redact-url.js';
import { endpointView } from '../data.js';
import { actionButton, badge, duration, html, layout, table, time } from '../html.js';
import { notFound } from '../http.js';
import { defineRoute } from '../route.js';
import { uuidParam } from '../schemas.js';
import { endpointActions } from './page-endpoints.js';

export default defineRoute({
  method: 'GET', path: '/endpoints/:id', access: 'user', kind: 'page',
  async handle(ctx) {
    const p = ctx.page;
    const id = uuidParam(ctx.params.id);
    const found = await ctx.bus.endpoints.get(id);
    if (!found) throw notFound(`endpoint ${id}`);
    const e = endpointView(found);
    // The URL may carry the receiver's credentials (?token=…): shown redacted, and the edit form
    // does not echo it back into the page.
    const shown = redactUrl(e.url);
    const attempts = await ctx.bus.endpoints.attempts(id, { limit: 100 });
    const here = `/endpoints/${id}`;
    const rows = attempts.map((a) => [
      time(a.at), html`<a href="${p.base}/events/${a.eventId}"><code>${a.eventId.slice(0, 13)}…</code></a>`, a.attempt, badge(a.outcome),
      a.status ?? '-', duration(a.durationMs), html`<code class="preview">${a.error ?? a.responseExcerpt}</code>`,
      a.deliveryId ? actionButton(p, `/api/deliveries/${a.deliveryId}/resend`, 'Resend', { returnTo: here }) : '',
    ]);
    const body = html`<h1>Endpoint</h1>
<dl>
<dt>URL</dt><dd><code>${shown}</code></dd>
<dt>Description</dt><dd>${e.description || '-'}</dd>
<dt>Event types</dt><dd><code>${e.eventTypes.join(', ')}</code></dd>
<dt>State</dt><dd>${badge(e.state)}</dd>
<dt>Failing since</dt><dd>${time(e.failingSince)}</dd>
<dt>Last success</dt><dd>${time(e.lastSuccessAt)} <span class="muted">noted to within a tenth of webhooks.failingDelayMs (30 s by default); test deliveries do not count</span></dd>
<dt>Disabled</dt><dd>${time(e.disabledAt)} ${e.disabledReason ?? ''}</dd>
<dt>Secret</dt><dd><code>…${e.secretHint}</code></dd>
<dt>Created</dt><dd>${time(e.createdAt)}</dd>
</dl>
<div class="actions">${endpointActions(p, e, here)}</div>
<h2>Edit</h2>
<form class="stack" method="post" action="${p.base}/api/endpoints/${e.id}/update">
<input type="hidden" name="_csrf" value="${p.csrf ?? ''}"><input type="hidden" name="_return" value="${here}">
${shown === e.url
  ? html`<label>URL <input type="url" name="url" required value="${e.url}"></label>`
  : html`<label>URL <input type="url" name="url" placeholder="${shown}"> <span class="muted">blank keeps the current URL, whose secret parts the panel does not show</span></label>`}
<label>Event types (comma-separated; order.* patterns) <input name="eventTypes" required value="${e.eventTypes.join(', ')}"></label>
<label>Description <input name="description" value="${e.description ?? ''}"></label>
<div><button type="submit">Save</button> <span class="muted">State, secret and attempt log stay.</span></div>
</form>
<h2>Attempt log</h2>
${table(['When', 'Event', 'Attempt', 'Outcome', 'HTTP', 'Took', 'Response / error', ''], rows, 'No attempts yet.')}`;
    return { html: layout(p, 'Endpoint', body) };
  },
});
