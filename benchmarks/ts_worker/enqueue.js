// Enqueues runs of the TS worker's `bench.raw_flow` with the SDK's own DBOSClient (a database migrated by the
// TS SDK has its schema, not the Python SDK's). One JSON request per stdin line:
//   {"who": "...", "nodes": 1|3, "appVersion": "..." (optional)}
// and one line back on stdout: the workflow id, or `error: <message>`. Ends at the end of stdin.
'use strict';

const readline = require('node:readline');
const { randomUUID } = require('node:crypto');
const { DBOSClient } = require('@dbos-inc/dbos-sdk');

async function main() {
  const client = await DBOSClient.create({
    systemDatabaseUrl: process.env.DATABASE_URL_EXECUTIONS,
    applicationName: process.env.DBOS_APPLICATION_NAME || 'fireflow',
  });
  const lines = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of lines) {
    if (!line.trim()) continue;
    try {
      const request = JSON.parse(line);
      const options = {
        queueName: process.env.BENCH_QUEUE || 'fireflow-executions',
        workflowName: 'bench.raw_flow',
        workflowID: randomUUID(),
      };
      if (request.appVersion) options.appVersion = request.appVersion;
      const handle = await client.enqueue(options, { inputs: { who: request.who }, nodes: request.nodes });
      process.stdout.write(`${handle.workflowID}\n`);
    } catch (err) {
      process.stdout.write(`error: ${String(err && err.message ? err.message : err).replace(/\s+/g, ' ')}\n`);
    }
  }
  await client.destroy();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
