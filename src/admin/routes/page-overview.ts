// GET /: the overview page. Alerts first, then backlog, oldest unfanned age, poisoned count,
// jobs by state and table sizes; it reloads itself every few seconds.
import { checkHealth } from '../health.js';
import { formatBytes } from '../../core/format.js';
import { actionButton, badge, duration, html, layout, table, time } from '../html.js';
import type { Alert } from '../alerts.js';
import { defineRoute, type RouteContext } from '../route.js';

export default defineRoute({
  method: 'GET', path: '/', access: 'user', kind: 'page',
  async handle(ctx) {
    const [o, health] = await Promise.all([ctx.bus.overview(), checkHealth(ctx.bus, ctx.leaderGraceMs)]);
    const p = ctx.page;
    const alerts = o.alerts.length
      ? html`<section class="alerts" aria-label="Alerts">${o.alerts.map((a) => alertRow(ctx, a))}</section>`
      : html`<p class="allclear" id="no-alerts">No alerts: the backlog is moving, nothing is poisoned or dead-lettered.</p>`;
    const tile = (id: string, label: string, value: string | number, bad: boolean, href?: string) =>
      html`<div class="tile${bad ? ' bad' : ''}" id="${id}"><div class="n">${href ? html`<a href="${p.base}${href}">${value}</a>` : value}</div><div class="l">${label}</div></div>`;
    const est = (k: string) => (o.estimated.includes(k) ? ' (estimate)' : '');
    const body = html`<h1>Overview</h1>
${alerts}
<section class="tiles" aria-label="Figures">
${tile('backlog', `backlog: unfanned events${est('backlog')}`, o.backlog, o.backlog > 1000, '/events?state=unfanned')}
${tile('oldest-unfanned', 'oldest unfanned event', duration(o.oldestUnfannedAgeMs), (o.oldestUnfannedAgeMs ?? 0) > 300_000)}
${tile('poisoned', `poisoned events${est('poisoned')}`, o.poisoned, o.poisoned > 0, '/events?state=poisoned')}
${tile('discarded', 'dead letters (discarded jobs)', o.jobs.discarded ?? 0, (o.jobs.discarded ?? 0) > 0, '/jobs?state=discarded')}
${tile('leader', 'leader lease', health.leader === 'seen' ? 'held' : health.leader, health.leader !== 'seen')}
</section>
<div class="grid2">
<section><h2>Jobs by state</h2>
${table(['State', 'Jobs'], Object.entries(o.jobs).map(([state, n]) => [html`<a href="${p.base}/jobs?state=${state}">${badge(state)}</a>`, html`<span class="num">${n}</span>`]), 'No jobs.', { compact: true })}
</section>
<section><h2>Table sizes</h2>
${table(['Table', 'Size'], o.tables.map((t) => [html`<code>${t.name}</code>`, formatBytes(t.totalBytes)]), 'Table sizes are not reported by this version of rea.', { compact: true })}
</section>
</div>`;
    return { html: layout(p, 'Overview', body) };
  },
});

function alertRow(ctx: RouteContext, a: Alert) {
  const p = ctx.page;
  const action = a.name === 'events_poisoned'
    ? html`${actionButton(p, '/api/events/requeue', 'Requeue poisoned events', { fields: { poisoned: 'true' }, confirm: 'Requeue every poisoned event? Fix the cause first, or they will be poisoned again.', kind: 'primary', returnTo: '/' })} <a href="${p.base}/events?state=poisoned">view</a>`
    : a.name === 'jobs_discarded' ? html`<a href="${p.base}/jobs?state=discarded">view dead letters</a>`
      : a.name === 'jobs_waiting' ? html`<a href="${p.base}/jobs?state=available">view waiting jobs</a>`
      : a.name === 'events_backlog' ? html`<a href="${p.base}/events?state=unfanned">view backlog</a>`
        : a.name === 'endpoint_disabled' ? html`<a href="${p.base}/endpoints?state=disabled">view endpoints</a>` : '';
  return html`<div class="alert" data-alert="${a.name}"><strong>${a.name}</strong><span>${a.message}</span><span class="muted">since ${time(a.since)}</span>${action}</div>`;
}
