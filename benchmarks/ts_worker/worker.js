// The DBOS-TS worker the benchmark compares against: @dbos-inc/dbos-sdk 4.27.6 (the TypeScript FireFlow execution worker's SDK), configured
// as the TypeScript FireFlow execution worker's env table says (DBOS_WORKER_CONCURRENCY, DBOS_QUEUE_CONCURRENCY,
// DBOS_QUEUE_POLLING_INTERVAL_MS on fireflow-executions, DBOS_SYSTEM_DATABASE_POOL_SIZE, FIREFLOW_WORKER_ID,
// DBOS_RUN_MIGRATIONS, DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS, DBOS_LOG_LEVEL, the sandbox and terminal sizes), with
// the four queues registered as the TypeScript FireFlow execution worker's queue.ts does (in-process WorkflowQueue objects).
//
// It runs the same steps as the Python baseline (benchmarks/baseline_worker.py): `bench.raw_flow` is one
// step (`{"nodes": 1}`) or three (greet -> card -> summary). Benchmark-only variables: BENCH_QUEUES (the
// queues it listens to), BENCH_POLL_ALL_QUEUES=true (every queue at DBOS_QUEUE_POLLING_INTERVAL_MS, not
// only fireflow-executions), BENCH_READY_FILE (created once launched). SIGTERM drains and exits.
'use strict';

const fs = require('node:fs');
const { DBOS, WorkflowQueue } = require('@dbos-inc/dbos-sdk');

const env = process.env;
const int = (name, fallback) => (env[name] === undefined || env[name] === '' ? fallback : parseInt(env[name], 10));

const workerConcurrency = int('DBOS_WORKER_CONCURRENCY', 50);
const globalConcurrency = int('DBOS_QUEUE_CONCURRENCY', 0) || undefined; // 0 = no cap
const pollingMs = int('DBOS_QUEUE_POLLING_INTERVAL_MS', 50);
const pollAll = env.BENCH_POLL_ALL_QUEUES === 'true';
const polling = (isExecutions) => (isExecutions || pollAll ? { minPollingIntervalMs: pollingMs } : {});

const queues = {
  'fireflow-executions': new WorkflowQueue('fireflow-executions', {
    workerConcurrency,
    concurrency: globalConcurrency,
    ...polling(true),
  }),
  'fireflow-executions-background': new WorkflowQueue('fireflow-executions-background', {
    workerConcurrency: Math.max(1, Math.floor(workerConcurrency / 2)),
    concurrency: globalConcurrency,
    ...polling(false),
  }),
  'fireflow-sandbox': new WorkflowQueue('fireflow-sandbox', {
    workerConcurrency: int('FIREFLOW_SANDBOX_QUEUE_CONCURRENCY', 10),
    ...polling(false),
  }),
  'fireflow-terminal': new WorkflowQueue('fireflow-terminal', {
    workerConcurrency: int('FIREFLOW_TERMINAL_QUEUE_CONCURRENCY', 10),
    ...polling(false),
  }),
};

async function rawFlow(request) {
  const who = String(request.inputs.who);
  const greeting = await DBOS.runStep(async () => `Hello, ${who}!`, { name: 'greet' });
  if (request.nodes === 1) {
    return { greet: greeting };
  }
  const card = await DBOS.runStep(
    async () => {
      let value = { greeting, to: who, draft: true };
      value = Object.fromEntries(Object.entries(value).filter(([key]) => key !== 'draft'));
      return Object.fromEntries(Object.entries(value).map(([key, item]) => [key === 'to' ? 'recipient' : key, item]));
    },
    { name: 'card' },
  );
  const summary = await DBOS.runStep(async () => `${card.greeting} (to ${card.recipient})`, { name: 'summary' });
  return { summary };
}

DBOS.registerWorkflow(rawFlow, { name: 'bench.raw_flow' });

async function main() {
  const served = (env.BENCH_QUEUES || 'fireflow-executions').split(',').filter(Boolean);
  DBOS.setConfig({
    name: env.DBOS_APPLICATION_NAME || 'fireflow',
    systemDatabaseUrl: env.DATABASE_URL_EXECUTIONS,
    systemDatabasePoolSize: int('DBOS_SYSTEM_DATABASE_POOL_SIZE', 30),
    executorID: env.FIREFLOW_WORKER_ID || env.DBOS__VMID || 'local',
    applicationVersion: env.FIREFLOW_APPLICATION_VERSION || '1.0.0',
    runMigrations: (env.DBOS_RUN_MIGRATIONS || 'true') !== 'false',
    logLevel: env.DBOS_LOG_LEVEL || 'info',
    listenQueues: served.map((name) => queues[name]),
    runAdminServer: false,
  });
  await DBOS.launch();
  if (env.BENCH_READY_FILE) {
    fs.writeFileSync(env.BENCH_READY_FILE, 'ready\n');
  }
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await DBOS.shutdown({ workflowCompletionTimeoutMS: int('DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS', 25000) });
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
