import { Session } from 'node:inspector/promises';
import { writeFileSync } from 'node:fs';
const s = new Session(); s.connect();
await s.post('HeapProfiler.enable');
await s.post('HeapProfiler.startSampling', { samplingInterval: 2048, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
globalThis.__heapStop = async () => { const { profile } = await s.post('HeapProfiler.stopSampling'); writeFileSync('/tmp/hprof/x.heapprofile', JSON.stringify(profile)); };
