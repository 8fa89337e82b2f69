// The RESP front through ioredis (tests/resp/test_resp_clients.py runs it): connects (ioredis
// asks INFO first, its ready check), pipelines N CL.THROTTLE of one key and the RL.CHECKs
// given, and prints every reply as one JSON document on stdout.
//   node ioredis_client.js PORT KEY N [SERVICE USER]...
'use strict';
const Redis = require('ioredis');

async function main() {
  const [port, key, n, ...checks] = process.argv.slice(2);
  const r = new Redis({ port: Number(port), host: '127.0.0.1', lazyConnect: true,
                        maxRetriesPerRequest: 0, enableOfflineQueue: false });
  await r.connect();
  const p = r.pipeline();
  for (let i = 0; i < Number(n); i++) {
    p.call('CL.THROTTLE', key, '9', '1', '3600');
  }
  for (let i = 0; i + 1 < checks.length; i += 2) {
    p.call('RL.CHECK', checks[i], checks[i + 1]);
  }
  p.call('CL.THROTTLE', key, 'x', '1', '1');
  p.ping();
  const res = await p.exec();
  const out = res.map(([err, v]) => (err ? { error: err.message } : v));
  const info = await r.info();
  process.stdout.write(JSON.stringify({ replies: out, info_has_version: /redis_version:/.test(info) }));
  r.disconnect();
}

main().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
