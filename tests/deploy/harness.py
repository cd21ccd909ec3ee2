"""The deployment-fidelity harness: `sam build` the stack, read the template as SAM deploys it, make its
tables, queues and SSM parameters in a moto server, and run each function from the built artifact in a
fresh interpreter of the runtime's Python with exactly the environment the template gives it. Every AWS
call the function makes is recorded and held against the IAM policies of its role."""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SAM_VENV = ROOT / ".venv-sam"
BUILD_DIR = ROOT / ".aws-sam" / "fidelity"
REGION, ACCOUNT = "us-east-1", "123456789012"
MARK = "\x1eENGRAM-RT "
# What the Lambda Python runtime has besides the standard library (the layer must bring the rest).
RUNTIME_BOTO3 = "boto3==1.44.8"

# The AWS managed policies SAM attaches, as the statements they grant (only what engram could touch).
MANAGED_POLICIES = {
    "AWSLambdaBasicExecutionRole": [
        {"Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"], "Resource": "*"}
    ],
    "AWSLambdaSQSQueueExecutionRole": [
        {
            "Action": [
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:PutLogEvents",
            ],
            "Resource": "*",
        }
    ],
    "AWSLambdaVPCAccessExecutionRole": [
        {
            "Action": [
                "ec2:CreateNetworkInterface",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DeleteNetworkInterface",
                "ec2:AssignPrivateIpAddresses",
                "ec2:UnassignPrivateIpAddresses",
            ],
            "Resource": "*",
        }
    ],
    "AWSXrayWriteOnlyAccess": [
        {
            "Action": [
                "xray:PutTraceSegments",
                "xray:PutTelemetryRecords",
                "xray:GetSamplingRules",
                "xray:GetSamplingTargets",
                "xray:GetSamplingStatisticSummaries",
            ],
            "Resource": "*",
        }
    ],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----- build ---------------------------------------------------------------------------------------


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for base in ("template.yaml", "layers/engram", "functions"):
        path = ROOT / base
        files = (
            [path]
            if path.is_file()
            else sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
            )
        )
        for f in files:
            digest.update(str(f.relative_to(ROOT)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()


def runtime_python(runtime: str) -> str:
    """The interpreter of the template's runtime (python3.11 -> that Python's real executable)."""
    found = shutil.which(runtime)
    if not found:
        raise RuntimeError(
            f"{runtime} is not on PATH: the fidelity suite runs functions on the runtime's own Python"
        )
    return subprocess.run(
        [found, "-c", "import sys; print(sys.executable)"], check=True, capture_output=True, text=True
    ).stdout.strip()


def sam_build() -> Path:
    """`sam build` (offline: pip reaches only the package registry) into .aws-sam/fidelity, reused while
    the template, the layer and the functions are unchanged."""
    stamp = BUILD_DIR / ".sources"
    digest = _sources_digest()
    # one sam build at a time in this checkout (make sam-local takes the same lock): they share .aws-sam
    BUILD_DIR.parent.mkdir(exist_ok=True)
    with open(BUILD_DIR.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest and (BUILD_DIR / "template.yaml").exists():
            return BUILD_DIR
        shutil.rmtree(BUILD_DIR, ignore_errors=True)
        built = subprocess.run(
            [str(SAM_VENV / "bin" / "sam"), "build", "--build-dir", str(BUILD_DIR)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": REGION},
        )
        assert built.returncode == 0, f"sam build failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
        stamp.write_text(digest)
    return BUILD_DIR


def runtime_site(python: str) -> Path:
    """boto3 as the Lambda runtime supplies it, installed for the runtime's Python."""
    version = subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    target = ROOT / ".aws-sam" / f"runtime-site-{version}"
    if not (target / ".compiled").exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-compile",
                RUNTIME_BOTO3,
                "-t",
                str(target),
                "--python-version",
                version,
                "--only-binary=:all:",
            ],
            check=True,
            capture_output=True,
        )
        # the runtime's own packages come with their bytecode
        subprocess.run(
            [python, "-m", "compileall", "-q", "-j", "0", str(target)], check=True, capture_output=True
        )
        (target / ".compiled").touch()
    return target


def sam_transform(parameters: dict[str, str]) -> dict:
    """The template as CloudFormation, as SAM deploys it."""
    out = subprocess.run(
        [
            str(SAM_VENV / "bin" / "python"),
            str(HERE / "sam_transform.py"),
            str(ROOT / "template.yaml"),
            json.dumps(parameters),
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "AWS_DEFAULT_REGION": REGION},
    )
    return json.loads(out.stdout)


# ----- CloudFormation, resolved ----------------------------------------------------------------------


class Stack:
    """A transformed template with parameter values and the physical resources made for it in moto."""

    def __init__(self, template: dict, parameters: dict[str, str], name: str = "fid"):
        self.template = template
        self.name = name
        self.parameters = {}
        for key, spec in template.get("Parameters", {}).items():
            value = parameters.get(key, spec.get("Default"))
            if value is None:
                raise ValueError(f"parameter {key} has no default and no value")
            value = str(value)
            self.parameters[key] = value.split(",") if spec["Type"] == "CommaDelimitedList" else value
        self.physical: dict[str, dict[str, str]] = {}  # logical id -> {"Ref": ..., "Arn": ..., ...}

    # intrinsic functions
    def condition(self, name: str) -> bool:
        return bool(self.resolve(self.template.get("Conditions", {})[name]))

    def _pseudo(self, name: str):
        return {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.name,
            "AWS::NoValue": None,
        }.get(name)

    def _ref(self, name: str):
        if name.startswith("AWS::"):
            return self._pseudo(name)
        if name in self.parameters:
            return self.parameters[name]
        if name in self.physical:
            return self.physical[name]["Ref"]
        return f"{self.name}-{name}"  # a resource the test does not make (an API, a role): any stable name

    def _getatt(self, logical: str, attribute: str):
        made = self.physical.get(logical, {})
        if attribute in made:
            return made[attribute]
        return f"arn:aws:fake:{REGION}:{ACCOUNT}:{logical}/{attribute}"

    def _sub(self, text: str, variables: dict) -> str:
        def one(match):
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(self.resolve(variables[name]))
            if "." in name and not name.startswith("AWS::"):
                return str(self._getatt(*name.split(".", 1)))
            return str(self._ref(name))

        return re.sub(r"\$\{([^}]+)\}", one, text)

    def resolve(self, value):
        if isinstance(value, list):
            return [v for v in (self.resolve(v) for v in value) if v is not None]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self._ref(arg)
            if key == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self._getatt(logical, attribute)
            if key == "Fn::Sub":
                return self._sub(arg, {}) if isinstance(arg, str) else self._sub(arg[0], arg[1])
            if key == "Fn::Join":
                return arg[0].join(str(v) for v in self.resolve(arg[1]))
            if key == "Fn::If":
                return self.resolve(arg[1] if self.condition(arg[0]) else arg[2])
            if key == "Fn::Select":
                return self.resolve(arg[1])[int(self.resolve(arg[0]))]
            if key == "Fn::Split":
                return str(self.resolve(arg[1])).split(arg[0])
            if key == "Fn::Equals":
                a, b = self.resolve(arg[0]), self.resolve(arg[1])
                return str(a) == str(b)
            if key == "Fn::Not":
                return not self.resolve(arg[0])
            if key == "Fn::And":
                return all(self.resolve(a) for a in arg)
            if key == "Fn::Or":
                return any(self.resolve(a) for a in arg)
            if key == "Condition":
                return self.condition(arg)
        return {k: r for k, r in ((k, self.resolve(v)) for k, v in value.items()) if r is not None}

    def resources(self, kind: str) -> dict[str, dict]:
        """Resources of a type whose Condition holds, properties resolved."""
        out = {}
        for logical, resource in self.template["Resources"].items():
            if resource["Type"] != kind:
                continue
            if "Condition" in resource and not self.condition(resource["Condition"]):
                continue
            out[logical] = resource
        return out

    # provisioning in moto
    def provision(self, dynamodb, sqs, ssm, secrets: dict[str, str]) -> None:
        """Make every table and queue of the template, and the SSM parameters it names, in moto."""
        for logical, resource in self.resources("AWS::DynamoDB::Table").items():
            props = self.resolve(resource["Properties"])
            name = f"{self.name}-{logical}"
            args = {
                k: props[k]
                for k in ("KeySchema", "AttributeDefinitions", "GlobalSecondaryIndexes")
                if k in props
            }
            dynamodb.create_table(TableName=name, BillingMode=props.get("BillingMode", "PROVISIONED"), **args)
            self.physical[logical] = {"Ref": name, "Arn": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"}
        queues = self.resources("AWS::SQS::Queue")
        for logical in sorted(queues, key=lambda q: "RedrivePolicy" in queues[q].get("Properties", {})):
            props = self.resolve(queues[logical].get("Properties", {}))
            name = f"{self.name}-{logical}"
            attributes = {
                k: (json.dumps(v) if isinstance(v, dict) else str(v))
                for k, v in props.items()
                if k
                in (
                    "VisibilityTimeout",
                    "MessageRetentionPeriod",
                    "RedrivePolicy",
                    "DelaySeconds",
                    "KmsMasterKeyId",
                    "SqsManagedSseEnabled",
                    "ReceiveMessageWaitTimeSeconds",
                )
            }
            url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
            self.physical[logical] = {
                "Ref": url,
                "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}",
                "QueueName": name,
            }
        for parameter, value in secrets.items():
            ssm.put_parameter(Name=parameter, Value=value, Type="SecureString", Overwrite=True)

    def function(self, logical: str, build_dir: Path) -> Function:
        resource = self.template["Resources"][logical]
        props = self.resolve(resource["Properties"])
        role_logical = resource["Properties"]["Role"]["Fn::GetAtt"][0]
        layers = []
        for layer in resource["Properties"].get("Layers", []):
            if (
                isinstance(layer, dict) and "Ref" in layer
            ):  # ours: SAM suffixes a hash, the build dir does not
                layers.append(build_dir / re.sub(r"[0-9a-f]{10}$", "", layer["Ref"]) / "python")
        return Function(
            logical_id=logical,
            handler=props["Handler"],
            runtime=props["Runtime"],
            timeout=int(props.get("Timeout", 3)),
            memory=int(props.get("MemorySize", 128)),
            code=build_dir / logical,
            layers=layers,
            environment={k: str(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()},
            statements=self.role_statements(role_logical),
            properties=props,
        )

    def role_statements(self, role_logical: str) -> list[dict]:
        """Every Allow statement of a role: its inline policies, resolved, and its managed policies."""
        props = self.template["Resources"][role_logical]["Properties"]
        statements = []
        for policy in props.get("Policies", []):
            document = self.resolve(policy["PolicyDocument"])
            statements += [s for s in document["Statement"] if s.get("Effect", "Allow") == "Allow"]
        for arn in self.resolve(props.get("ManagedPolicyArns", [])):
            statements += MANAGED_POLICIES.get(arn.rsplit("/", 1)[-1], [])
        return statements

    def event_source_queues(self, function_logical: str) -> list[str]:
        """Queue ARNs that Lambda polls for this function (with the function's own role)."""
        out = []
        for resource in self.resources("AWS::Lambda::EventSourceMapping").values():
            props = self.resolve(resource["Properties"])
            if props.get("FunctionName") in (self._ref(function_logical), f"{self.name}-{function_logical}"):
                out.append(props["EventSourceArn"])
        return out


# ----- IAM -------------------------------------------------------------------------------------------


def iam_requests(call: dict) -> list[tuple[str, str]]:
    """(action, resource ARN) pairs that IAM authorises for one recorded API call."""
    service, operation = call["service"], call["operation"]
    action = f"{service}:{operation}"
    if service == "dynamodb":
        suffix = f"/index/{call['index']}" if call.get("index") else ""
        return [
            (action, f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{t}{suffix}") for t in call.get("tables", [])
        ] or [(action, "*")]
    if service == "sqs":
        name = call.get("queue_url", "").rstrip("/").rsplit("/", 1)[-1]
        return [(action, f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")]
    if service == "ssm":
        return [
            (
                f"ssm:{operation.removesuffix('s') if operation == 'GetParameters' else operation}",
                f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/{n.lstrip('/')}",
            )
            for n in call.get("names", [])
        ]
    return [(action, "*")]


def _listify(value) -> list:
    return value if isinstance(value, list) else [value]


def allowed(statements: list[dict], action: str, resource: str) -> bool:
    """Whether any Allow statement grants the action on the resource (IAM's wildcard rules)."""
    for statement in statements:
        actions = _listify(statement.get("Action", []))
        if not any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in actions):
            continue
        if any(fnmatch.fnmatchcase(resource, r) for r in _listify(statement.get("Resource", []))):
            return True
    return False


def denied(calls: list[dict], statements: list[dict]) -> list[str]:
    """Every call (action on resource) the statements do not allow."""
    out = []
    for call in calls:
        for action, resource in iam_requests(call):
            if not allowed(statements, action, resource):
                out.append(f"{action} on {resource}")
    return sorted(set(out))


# ----- functions, run from the built artifact ---------------------------------------------------------


@dataclass
class Function:
    """One AWS::Lambda::Function of the transformed template, resolved."""

    logical_id: str
    handler: str
    runtime: str
    timeout: int
    memory: int
    code: Path
    layers: list[Path]
    environment: dict[str, str]
    statements: list[dict]
    properties: dict = field(default_factory=dict)

    def lambda_environment(
        self,
        aws_endpoint: str,
        call_log: Path,
        runtime_dir: Path,
        shim_dir: Path,
        outside: dict[str, str] | None = None,
    ) -> dict[str, str]:
        """The environment Lambda gives the function: the runtime's reserved variables, then the
        template's variables. Only where AWS is (moto) and where the outside world is (fakes on
        127.0.0.1, named in `outside`) differ from a deployment."""
        env = {
            "PATH": f"{shim_dir}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "en_US.UTF-8",
            "TZ": ":UTC",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "ASIAFIDELITY",
            "AWS_SECRET_ACCESS_KEY": "fidelity",
            "AWS_SESSION_TOKEN": "fidelity",
            "AWS_LAMBDA_FUNCTION_NAME": f"fid-{self.logical_id}",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.memory),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{self.runtime}",
            "LAMBDA_TASK_ROOT": str(self.code),
            "LAMBDA_RUNTIME_DIR": str(runtime_dir),
            "PYTHONDONTWRITEBYTECODE": "1",  # /var/task and /opt are read-only on Lambda
            "AWS_ENDPOINT_URL": aws_endpoint,
            "ENGRAM_TEST_CALL_LOG": str(call_log),
            "ENGRAM_TEST_TIMEOUT_S": str(self.timeout),
        }
        env.update(self.environment)
        env.update(outside or {})
        return env


class Invocations:
    """A function's process, initialised once and invoked many times (a warm Lambda container)."""

    def __init__(self, function: Function, python: str, env: dict[str, str], runtime_dir: Path):
        self.function = function
        self.spawned = time.perf_counter()
        layer = str(function.layers[0]) if function.layers else ""
        self.process = subprocess.Popen(
            [
                python,
                "-S",
                str(HERE / "lambda_runtime.py"),
                str(function.code),
                layer,
                str(runtime_dir),
                function.handler,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=function.code,
            text=True,
        )
        self.logs: list[str] = []
        self._stderr: list[str] = []
        threading.Thread(target=lambda: self._stderr.extend(self.process.stderr), daemon=True).start()
        first = self._answer()
        if "init_error" in first:
            raise RuntimeError(f"{function.logical_id} failed at init:\n{first['init_error']}\n{self.stderr}")
        self.init_ms = first["init_ms"]
        self.ready_ms = (time.perf_counter() - self.spawned) * 1000
        self.first_response_ms: float | None = None

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def _answer(self) -> dict:
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.function.logical_id} exited:\n{''.join(self.logs)}\n{self.stderr}")
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
            self.logs.append(line)

    def invoke(self, event: dict) -> dict:
        """Run the handler on one event; returns {"result", "error", "ms"}."""
        self.process.stdin.write(json.dumps(event) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        if self.first_response_ms is None:
            self.first_response_ms = (time.perf_counter() - self.spawned) * 1000
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def read_calls(path: Path) -> list[dict]:
    """The AWS calls recorded so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tree_listing(root: Path) -> set[str]:
    """Every file under a directory (what a read-only /var/task and /opt must still hold afterwards)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def apigw_event(
    method: str, path: str, body: str | bytes = "", headers: dict | None = None, query: str = ""
) -> dict:
    """An API Gateway HTTP API (payload 2.0) event, as the HttpApi integration sends it."""
    import base64

    binary = isinstance(body, bytes)
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": {"host": "abc123.execute-api.us-east-1.amazonaws.com", **(headers or {})},
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "abc123",
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.7",
                "userAgent": "fidelity",
            },
            "requestId": "fid",
            "routeKey": "$default",
            "stage": "$default",
            "timeEpoch": int(time.time() * 1000),
        },
        "body": base64.b64encode(body).decode() if binary else body,
        "isBase64Encoded": binary,
    }


class WebAdapterProcess:
    """A function whose handler is a start script behind the Lambda Web Adapter (run.sh -> uvicorn): the
    script started as the adapter starts it, then readiness polled on AWS_LWA_READINESS_CHECK_PATH the way
    the adapter polls it (ready at the first status below 500)."""

    def __init__(self, function: Function, env: dict[str, str], timeout_s: float = 30):
        self.function = function
        self.port = int(env["PORT"])
        self.spawned = time.perf_counter()
        self.process = subprocess.Popen(
            ["/bin/sh", str(function.code / function.handler)],
            cwd=function.code,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._output: list[str] = []
        threading.Thread(target=lambda: self._output.extend(self.process.stdout), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"
        check = env.get("AWS_LWA_READINESS_CHECK_PATH", "/")
        deadline = time.monotonic() + timeout_s
        import httpx

        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{function.logical_id} exited before it was ready:\n{self.output}")
            try:
                if httpx.get(self.url + check, timeout=1).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{function.logical_id} was not ready on {check} within {timeout_s} s:\n{self.output}"
                )
            time.sleep(0.01)
        self.ready_ms = (time.perf_counter() - self.spawned) * 1000

    @property
    def output(self) -> str:
        return "".join(self._output)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
