// GET /events: the events browser, filtered by type, subject, trace id, state and time, newest first.
import { badge, html, layout, table, time } from '../html.js';
import { HttpError } from '../http.js';
import { defineRoute, parse, queryFields } from '../route.js';
import { eventListQuery } from '../schemas.js';

export default defineRoute({
  method: 'GET', path: '/events', access: 'user', kind: 'page',
  async handle(ctx) {
    const p = ctx.page;
    const raw = queryFields(ctx.query);
    let error: string | null = null;
    let page: Awaited<ReturnType<typeof ctx.bus.events.list>> = { items: [], nextCursor: null };
    try {
      const filter = parse(eventListQuery, raw);
      page = await ctx.bus.events.list(filter as Parameters<typeof ctx.bus.events.list>[0]);
    } catch (err) {
      if (!(err instanceof HttpError) && !(err instanceof Error && 'parameter' in err)) throw err;
      error = err.message;
    }
    const v = (k: string) => raw[k] ?? '';
    const states = ['', 'unfanned', 'fanned', 'poisoned'];
    const filters = html`<form class="filters" method="get" action="${p.base}/events" role="search">
<label>Type <input name="type" value="${v('type')}" placeholder="order.* or order.paid"></label>
<label>Subject <input name="subject" value="${v('subject')}"></label>
<label>Trace id <input name="traceId" value="${v('traceId')}"></label>
<label>State <select name="state">${states.map((s) => html`<option value="${s}"${s === v('state') ? html` selected` : ''}>${s || 'any'}</option>`)}</select></label>
<label>Since <input name="since" value="${v('since')}" placeholder="2025-01-31T12:00:00Z"></label>
<label>Until <input name="until" value="${v('until')}" placeholder="ISO 8601"></label>
<button type="submit" class="primary">Filter</button> <a href="${p.base}/events">clear</a>
</form>`;
    const rows = page.items.map((e) => [
      time(e.createdAt),
      html`<a href="${p.base}/events/${e.id}"><code>${e.type}</code></a>`,
      e.subject ?? html`<span class="muted">-</span>`,
      badge(e.state),
      html`<code class="preview">${e.payloadPreview}</code>`,
      e.traceId ? html`<a href="${p.base}/events?traceId=${encodeURIComponent(e.traceId)}" title="${e.traceId}"><code>${e.traceId.length > 14 ? `${e.traceId.slice(0, 12)}…` : e.traceId}</code></a>` : '',
    ]);
    const next = page.nextCursor ? new URLSearchParams({ ...raw, cursor: page.nextCursor }) : null;
    const body = html`<h1>Events</h1>${filters}
${error ? html`<p class="notice alert" role="alert">${error}</p>` : ''}
${table(['Recorded', 'Type', 'Subject', 'State', 'Payload', 'Trace id'], rows, 'No events match.')}
<nav class="pager">${raw.cursor ? html`<a href="${p.base}/events?${new URLSearchParams({ ...raw, cursor: '' }).toString().replace(/(^|&)cursor=(&|$)/, '$1')}">newest</a>` : ''}${next ? html`<a href="${p.base}/events?${next.toString()}" rel="next">older →</a>` : ''}</nav>`;
    return { html: layout(p, 'Events', body), status: error ? 400 : 200 };
  },
});
