-- A run's outcome in plain SQL (docs/run-contract.md), for any PostgreSQL client: its status, and for a run
-- in portable JSON its result or error as JSON. The worker keeps workflow_status.output/error filled (DBOS-py
-- 3.4 writes them to dbos.workflow_output, which is read first here as DBOS itself does).
-- Parameter: the run id, as psycopg's %(run_id)s (psql: \set run_id '...' and :'run_id').
SELECT ws.status,
       ws.serialization,
       CASE WHEN ws.serialization = 'portable_json' THEN coalesce(wo.output, ws.output)::json END AS output,
       CASE WHEN ws.serialization = 'portable_json' THEN coalesce(wo.error, ws.error)::json ->> 'message' END AS error
FROM dbos.workflow_status ws
LEFT JOIN dbos.workflow_output wo ON wo.workflow_uuid = ws.workflow_uuid
WHERE ws.workflow_uuid = %(run_id)s
