#!/bin/bash
# Started by the Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap); it forwards each invocation here.
PATH=$PATH:$LAMBDA_TASK_ROOT/bin PYTHONPATH=$PYTHONPATH:/opt/python:$LAMBDA_RUNTIME_DIR \
  exec python -m uvicorn --host 127.0.0.1 --port "${PORT:-8080}" --no-access-log app:app
