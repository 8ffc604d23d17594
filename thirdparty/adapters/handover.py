"""What `--victim command` hands a run and takes back, read and written with pandas alone.

Shared by the adapters that run inside thirdparty/envs/<name>/, so nothing here imports the suite.
The MIA_* variables and files are docs/contracts.md's, "A pipeline as a command"; the claim asked
for comes as `--epsilon {epsilon} --delta {delta}`, so the suite refuses an audit without it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Handed:
    members: pd.DataFrame  # categorical columns as strings, numeric ones as floats
    schema: dict
    seed: int
    epsilon: float
    delta: float
    rows: int  # how many records to release: the public expected member count, never len(members)

    @property
    def categorical(self) -> list[str]:
        return [c["name"] for c in self.schema["columns"] if c["kind"] == "categorical"]

    @property
    def numeric(self) -> list[dict]:
        return [c for c in self.schema["columns"] if c["kind"] != "categorical"]

    def categories(self, name: str) -> list[str]:
        column = next(c for c in self.schema["columns"] if c["name"] == name)
        return [category_text(v) for v in column["categories"]]


def category_text(value) -> str:
    """A category as the text a custodian's table holds: 22 and 22.0 are both "22", 17.5 "17.5"."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def add_claim_flags(parser) -> None:
    parser.add_argument("--epsilon", type=float, required=True, help="the claimed ε ({epsilon} in the TOML)")
    parser.add_argument("--delta", type=float, required=True, help="the claimed δ ({delta} in the TOML)")


def read_handed(args) -> Handed:
    """The run's inputs from the MIA_* variables and the claim's flags; exits with one line where a
    variable is missing."""
    try:
        schema = json.loads(open(os.environ["MIA_SCHEMA"]).read())
        members = pd.read_csv(os.environ["MIA_MEMBERS"])
        seed = int(os.environ["MIA_SEED"])
        rows = int(round(float(os.environ["MIA_EXPECTED_MEMBERS"])))
    except KeyError as missing:
        sys.exit(f"adapter: {missing.args[0]} is not set (the adapter is run by --victim command)")
    handed = Handed(members, schema, seed, args.epsilon, args.delta, rows)
    for name in handed.categorical:  # the survey's codes as text, as a custodian's CSV holds them
        members[name] = members[name].map(category_text)
    for column in handed.numeric:
        members[column["name"]] = members[column["name"]].astype(float)
    return handed


def write_release(handed: Handed, release: pd.DataFrame) -> None:
    """The release as a CSV of the schema's columns, categories back to the schema's values."""
    release = release[[c["name"] for c in handed.schema["columns"]]].copy()
    for name in handed.categorical:
        back = {
            category_text(v): v for v in next(c for c in handed.schema["columns"] if c["name"] == name)["categories"]
        }
        release[name] = release[name].map(lambda v: back.get(category_text(_number(v)), v))
    release.to_csv(os.environ["MIA_OUT"], index=False)


def write_claim(claim: dict) -> None:
    with open(os.environ["MIA_CLAIM"], "w") as f:
        json.dump(claim, f, indent=2, default=float)
        f.write("\n")


def _number(value):
    """A released category read back as a number where it is one ("22" or 22.0 -> 22)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return number
