// scratch: node --cpu-prof scripts/.prof.mjs N [fill|run|both]
import { createBus, defineEvents } from '../dist/index.js';
import { z } from 'zod';
import pg from 'pg';
import { readdirSync, readFileSync } from 'node:fs';
const pgCpu = () => { let t = 0; for (const d of readdirSync('/proc')) { if (!/^\d+$/.test(d)) continue; try { const st = readFileSync(`/proc/${d}/stat`, 'utf8'); const name = st.slice(st.indexOf('(') + 1, st.lastIndexOf(')')); if (!name.startsWith('postgres')) continue; const f = st.slice(st.lastIndexOf(')') + 2).split(' '); t += Number(f[11]) + Number(f[12]); } catch {} } return t * 10000; };
const N = Number(process.argv[2] ?? 100000);
const mode = process.argv[3] ?? 'both';
const url = 'postgres://postgres@127.0.0.1:5432/rea_prof';
const events = defineEvents({ 'bench.noop': z.object({ seq: z.number().int() }) });
const mk = (extra = {}) => createBus({ database: { postgres: url }, events, schema: 'p', ...extra });
if (mode !== 'run') {
  const admin = new pg.Client({ connectionString: 'postgres://postgres@127.0.0.1:5432/postgres' });
  await admin.connect();
  await admin.query('drop database if exists rea_prof with (force)');
  await admin.query('create database rea_prof');
  await admin.end();
  const b = mk(); await b.migrate();
  for (let s = 0; s < N; s += 500) {
    const batch = []; for (let i = s; i < Math.min(N, s + 500); i++) batch.push({ type: 'bench.noop', payload: { seq: i } });
    await b.transaction((tx) => b.recordMany(tx, batch));
  }
  await b.stop();
}
if (mode !== 'fill') {
  const bus = mk({ worker: { concurrency: 8 }, relay: { inlineMs: 50, concurrency: Number(process.env.RC ?? 2) } });
  let n = 0, done; const all = new Promise((r) => (done = r));
  bus.on('bench.noop', 'noop', async () => { if (++n === N) done(); }, { concurrency: 8 });
  const s0 = pgCpu(); const c0 = process.cpuUsage(); const t0 = performance.now();
  await bus.start();
  await all;
  const t = performance.now() - t0; const c = process.cpuUsage(c0); const sUs = pgCpu() - s0;
  console.log(JSON.stringify({ N, ms: Math.round(t), perSec: Math.round(N / t * 1000), nodeCpuUsPerJob: ((c.user + c.system) / N).toFixed(2), userUs: (c.user/N).toFixed(2), sysUs: (c.system/N).toFixed(2), serverUs: (sUs/N).toFixed(2) }));
  await bus.stop();
  if (globalThis.__heapStop) await globalThis.__heapStop();
}
