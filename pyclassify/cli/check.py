"""The ``check`` command: validates manifests (or a cluster), each problem named by its file,
line and field path."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from pyclassify.cli.common import (
    EXIT_INVALID,
    cluster_paths_argument,
    emit_json,
    err,
    fail,
    json_option,
    kube_options,
    out,
    print_problems,
    problem_json,
    read_manifests,
)
from pyclassify.counted import count
from pyclassify.terminal import symbol


@click.command(
    "check",
    epilog="""\b
Examples:
  pyclassify check examples/demo
  kubectl get networkpolicies -A -o yaml | pyclassify check -
""",
)
@cluster_paths_argument
@kube_options
@json_option
def check_cmd(
    paths: tuple[str, ...], kubeconfig: str | None, in_cluster: bool, kube_context: str | None, as_json: bool
) -> None:
    """Validate manifests (files, directories, or - for stdin) and print every error.

    Exit 1 if any manifest is invalid. Policies that cannot be enforced faithfully yet (for
    example `domains` rules) are reported as warnings.
    """
    from pyclassify.admission.policy import check_admission_documents

    project = read_manifests(paths, (kubeconfig, kube_context, in_cluster))
    problems = project.problems
    # ContainerAdmissionPolicy decides on resources, not packets: validated beside the IR.
    check_admission_documents(project.admission_documents, project.problems)
    admission = sum(n for k, n in project.skipped.items() if k.endswith("/ContainerAdmissionPolicy"))
    skipped_kinds = {k: n for k, n in project.skipped.items() if not k.endswith("/ContainerAdmissionPolicy")}
    from pyclassify import failsafe

    # The failsafe policies are built in, not read: not counted among the manifests' policies.
    policies = [p for p in project.policy_set.policies + project.policy_set.early if p.kind != failsafe.KIND]
    staged = project.policy_set.staged  # validated like their enforced kinds, never in force
    unenforceable = [
        {"policy": p.ref, "reasons": list(p.unenforceable)} for p in (*policies, *staged) if p.unenforceable
    ]
    walked = _walked_decisions(project) if not problems.errors else []
    if as_json:
        emit_json(
            {
                "valid": not problems.errors and not problems.empty_inputs,
                "empty_inputs": problems.empty_inputs,
                "documents": project.document_count,
                "policies": len(policies),
                "staged_policies": len(staged),
                "endpoints": len(project.inventory.endpoints),
                "errors": [problem_json(p) for p in problems.errors],
                "warnings": [problem_json(p) for p in problems.warnings],
                "unenforceable": unenforceable,
                "walked": walked,
                "admission_policies": admission,
                "skipped": skipped_kinds,
            }
        )
    else:
        print_problems(problems)
        for item in unenforceable:
            err.print(f"[yellow]not enforceable[/yellow]: {item['policy']}: {'; '.join(item['reasons'])}")
        for item in walked:
            shown = ", ".join(item["endpoints"][:3]) + (", ..." if len(item["endpoints"]) > 3 else "")
            err.print(
                f"[yellow]not compiled[/yellow]: the {item['direction']} policies of {len(item['endpoints'])} "
                f"endpoint(s) ({escape(shown)}) would compile to {item['megabytes']} MB, past the engine's bound: "
                f"their decisions walk the rules, slower ({escape(', '.join(item['policies']))})"
            )
        skipped = ", ".join(f"{k} x{v}" for k, v in skipped_kinds.items())
        summary = (
            f"{count(project.document_count, 'document')}: {count(len(policies), 'policy')}, "
            + (f"{count(len(staged), 'staged policy')}, " if staged else "")
            + (f"{count(admission, 'admission policy')}, " if admission else "")
            + f"{count(len(project.inventory.endpoints), 'endpoint')}"
            + (f"; skipped {skipped}" if skipped else "")
        )
        n_err, n_warn = len(problems.errors), len(problems.warnings)
        status = "[green]valid[/green]" if not n_err else f"[red]{count(n_err, 'error')}[/red]"
        if not n_err and problems.empty_inputs:
            status = f"[red]nothing to check in {escape(', '.join(problems.empty_inputs))}[/red]"
        out.print(f"{status}, {count(n_warn, 'warning')} {symbol('—', '-')} {summary}")
    if problems.errors or problems.empty_inputs:
        fail(EXIT_INVALID)


def _walked_decisions(project: Any) -> list[dict[str, Any]]:
    """The decisions the engine walks rule by rule because their compiled form would exceed its
    memory bound (``NativeEngine.walked_for_memory``)."""
    from pyclassify.engine import NativeEngine

    return NativeEngine(project.policy_set, project.inventory).walked_for_memory()
