#!/bin/sh
# The "fireflow-worker-crashing" test image: it migrates like the real worker, but its worker exits at start, as
# an image with a fatal bug would. The progress-deadline and auto-rollback tests roll it out.
if [ "$#" -eq 0 ] || [ "$1" = "run" ]; then
    echo "error: this test image's worker crashes at start" >&2
    exit 1
fi
exec "$FIREFLOW_REAL_WORKER" "$@"
