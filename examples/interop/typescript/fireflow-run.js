// A TypeScript caller of the FireFlow worker, through DBOS's own DBOSClient (@dbos-inc/dbos-sdk): what the
// FireFlow API or Flame Chorus does to enqueue a run, follow its events, read its result, cancel and resume
// it. See docs/run-contract.md; tests/worker/test_interop.py runs this very file against real workers.
//
//   DATABASE_URL_EXECUTIONS=postgresql://... node fireflow-run.js <command> ...
//     enqueue <request.json> [superjson|portable|java]   enqueue a run; prints its id
//     result <run id>                                   waits for the run; prints {"output": ...} or {"error": {...}}
//     events <run id>                                   prints the run's live events, one JSON line each, until it ends
//     list <run id>                                     prints the run as listWorkflows shows it: {"status", "input"}
//     cancel <run id> | resume <run id>                 cancels or resumes a run
//
// `superjson` is the SDK's default encoding (the worker decodes it), `portable` DBOS's portable JSON (what
// every SDK reads); `java` stands for any encoding the worker cannot read (a serializer of another name):
// such a run ends ERROR at once, with a message saying how to enqueue it.
'use strict';

const fs = require('node:fs');
const { randomUUID } = require('node:crypto');
// The SDK under test (the interop tests also run this file with the newest 5.x, installed under an alias).
const { DBOSClient } = require(process.env.FIREFLOW_DBOS_SDK || '@dbos-inc/dbos-sdk');

// The run contract (docs/run-contract.md): the workflow, its default queue and the events' stream.
const WORKFLOW_NAME = 'fireflow.run_flow';
const EXECUTIONS_QUEUE = 'fireflow-executions';
const EVENTS_STREAM = 'events';

// A serializer of another language's name: the worker reads no such encoding.
const javaStyleSerializer = {
  name: () => 'java_jackson',
  stringify: (value) => JSON.stringify(value),
  parse: (text) => (text === null ? null : JSON.parse(text)),
};

function connect(encoding) {
  return DBOSClient.create({
    systemDatabaseUrl: process.env.DATABASE_URL_EXECUTIONS,
    applicationName: process.env.DBOS_APPLICATION_NAME || 'fireflow',
    ...(encoding === 'java' ? { serializer: javaStyleSerializer } : {}),
  });
}

// Enqueue one run. `request` is the run request: {"flow": {...}} or {"flow_ref": "name"}, plus "inputs",
// and optionally "queue" and "events" ("live" writes every event to the stream as it happens).
async function enqueueRun(client, request, encoding) {
  const options = {
    queueName: request.queue || EXECUTIONS_QUEUE,
    workflowName: WORKFLOW_NAME,
    workflowID: randomUUID(),
  };
  if (encoding === 'portable') options.serializationType = 'portable';
  const handle = await client.enqueue(options, request);
  return handle.workflowID;
}

// The run's result, or its error: getResult() rejects when the run failed.
async function runResult(client, runId) {
  try {
    return { output: await client.retrieveWorkflow(runId).getResult() };
  } catch (err) {
    return { error: { name: err.name, message: err.message } };
  }
}

// The run's live events as they are written (a run enqueued with "events": "live"); ends with the run.
async function* runEvents(client, runId) {
  for await (const event of client.readStream(runId, EVENTS_STREAM)) yield event;
}

// The run as a list of runs shows it, its input loaded.
async function runListing(client, runId) {
  const [run] = await client.listWorkflows({ workflowIDs: [runId], loadInput: true });
  return { status: run.status, input: run.input };
}

async function main() {
  const [command, arg, encoding = 'superjson'] = process.argv.slice(2);
  const client = await connect(encoding);
  try {
    if (command === 'enqueue') {
      const request = JSON.parse(fs.readFileSync(arg, 'utf8'), reviveDates);
      console.log(await enqueueRun(client, request, encoding));
    } else if (command === 'result') {
      console.log(JSON.stringify(await runResult(client, arg)));
    } else if (command === 'events') {
      for await (const event of runEvents(client, arg)) console.log(JSON.stringify(event));
    } else if (command === 'list') {
      console.log(JSON.stringify(await runListing(client, arg)));
    } else if (command === 'cancel') {
      await client.cancelWorkflow(arg);
    } else if (command === 'resume') {
      await client.resumeWorkflow(arg);
    } else {
      throw new Error(`unknown command ${command}`);
    }
  } finally {
    await client.destroy();
  }
}

// A request file may ask for JavaScript values JSON has not - {"$date": ISO}, {"$bigint": "digits"},
// {"$regexp": "source"} - as a TypeScript caller's objects hold them (the SDK's default encoding keeps them).
function reviveDates(_key, value) {
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    if (typeof value.$date === 'string') return new Date(value.$date);
    if (typeof value.$bigint === 'string') return BigInt(value.$bigint);
    if (typeof value.$regexp === 'string') return new RegExp(value.$regexp);
  }
  return value;
}

module.exports = { connect, enqueueRun, runResult, runEvents, runListing, WORKFLOW_NAME, EVENTS_STREAM };

if (require.main === module) {
  main().catch((err) => {
    console.error(`error: ${String(err && err.message ? err.message : err).replace(/\s+/g, ' ')}`);
    process.exit(1);
  });
}
