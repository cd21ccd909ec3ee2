"""Run with aws-sam-cli's own Python: the template as CloudFormation, exactly as SAM would deploy it
(policy templates expanded into each function's role, Globals merged, event source mappings made).

    .venv-sam/bin/python tests/deploy/sam_transform.py template.yaml '<parameter values as JSON>'"""

import json
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoManagedPolicies:
    """Managed policy ARNs stay ARNs (the test knows the few it uses)."""

    def load(self):
        return {}


def main() -> None:
    with open(sys.argv[1]) as source:
        template = yaml_parse(source.read())
    for resource in template["Resources"].values():
        for key in ("CodeUri", "ContentUri"):
            if isinstance(resource.get("Properties", {}).get(key), str):
                resource["Properties"][key] = (
                    "s3://built/" + resource["Properties"][key]
                )  # as `sam package` would
    print(json.dumps(transform(template, json.loads(sys.argv[2]), NoManagedPolicies())))


if __name__ == "__main__":
    main()
