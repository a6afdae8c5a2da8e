"""The compose topology as its users meet it: the client tour and the HTTP calls of an agent
server through the API's published port, Flower behind its basic auth listing both workers,
Prometheus metrics on the API and on every worker, and the image's user and file system."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from typing import Any

import httpx

from om_api.client import OMClient
from om_api.schemas import MessageWire
from tests.containers.host import inspect, podman, run
from tests.containers.images import ROOT, SERVICE_IMAGE, image_size_mb
from tests.containers.stack import ComposeStack

MEMORY_REF = re.compile(r"\[om:([0-9a-f]{12})\]")


def test_the_client_tour_flushes_through_the_containers(
    stack: ComposeStack, figures: dict[str, Any]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env.update(OM_API_URL=stack.api_url, OM_API_KEY=stack.keys["tenant-a"], PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "client_tour.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    flushes = [line for line in done.stdout.splitlines() if line.startswith("flush:")]
    assert len(flushes) == 2 and all("succeeded" in line for line in flushes), done.stdout
    # The last line recalls the raw messages behind a memory id the context showed.
    assert done.stdout.splitlines()[-1].startswith("recalled: ['"), done.stdout
    figures["tour"] = done.stdout.splitlines()[-1]


def test_append_flush_context_and_recall_over_http(stack: ComposeStack) -> None:
    said = [
        text
        for n in range(1, 7)
        for text in (f"Please deploy build {n} to staging.", f"Build {n} is live on staging.")
    ]
    with OMClient(stack.api_url, stack.keys["tenant-b"]) as om:
        session = om.create_session(f"http-{uuid.uuid4().hex[:8]}").id
        roles = ("user", "assistant")
        messages = [MessageWire(role=roles[i % 2], content=text) for i, text in enumerate(said)]
        appended = om.append(session, messages)
        assert len(appended.appended_ids) == len(said)
        job = om.wait_for_job(om.flush(session).job_id, timeout_s=60)
        assert job.state == "succeeded", job
        context = om.context(session)
        assert context.unobserved.messages == 0
        memory, recent = context.blocks
        # The recent block shows the last messages verbatim; memory covers the older ones.
        assert said[-1] in recent.text and said[0] not in recent.text
        memory_ids = MEMORY_REF.findall(memory.text)
        assert memory_ids, memory.text
        recalled = om.recall(session, memory_ids[0])
        assert recalled.found
        sources = [s.message.content for s in recalled.sources if s.message]
        assert sources and set(sources) <= set(said), sources


def test_flower_answers_with_its_auth_and_lists_both_workers(stack: ComposeStack) -> None:
    user, _, password = stack.secrets["OM_FLOWER_BASIC_AUTH"].partition(":")
    with httpx.Client(base_url=stack.flower_url, timeout=15) as flower:
        assert flower.get("/healthcheck").status_code == 200  # open, for the health check
        assert flower.get("/api/workers").status_code == 401
        assert flower.get("/api/workers", auth=(user, "wrong")).status_code == 401
        answer = flower.get("/api/workers", params={"refresh": "1"}, auth=(user, password))
        assert answer.status_code == 200
        listed = set(answer.json())
    workers = stack.workers()
    assert len(workers) == 2
    for name in workers:
        state = inspect("container", name)
        assert state is not None
        assert f"om-worker@{state['Config']['Hostname']}" in listed, (name, listed)


def test_metrics_on_the_api_and_on_every_worker(stack: ComposeStack) -> None:
    assert httpx.get(f"{stack.api_url}/metrics", timeout=10).status_code == 401
    scrape = {"Authorization": f"Bearer {stack.secrets['OM_METRICS_TOKEN']}"}
    api = httpx.get(f"{stack.api_url}/metrics", headers=scrape, timeout=10)
    assert api.status_code == 200
    assert "om_api_requests_total" in api.text and "om_flush_backlog" in api.text
    handled = 0.0
    for name in stack.workers():
        worker = httpx.get(f"http://{stack.ip(name)}:9100/metrics", timeout=10)
        assert worker.status_code == 200, name
        assert "om_worker_flush_jobs_total" in worker.text, name
        handled += sum(
            float(line.rsplit(" ", 1)[1])
            for line in worker.text.splitlines()
            if line.startswith("om_worker_flush_jobs_total{")
        )
    assert handled >= 1  # the flushes of the tests above ran on these workers


def test_every_service_runs_as_the_image_user_on_a_read_only_root(
    stack: ComposeStack, figures: dict[str, Any]
) -> None:
    image = inspect("image", SERVICE_IMAGE)
    assert image is not None
    assert image["Config"]["User"] == "10001:10001"
    # Built in Docker's format, the image keeps its HEALTHCHECK (OCI has no such field).
    assert image["Healthcheck"]["Test"] == ["CMD", "om-healthcheck"]
    for name in stack.om_containers():
        assert podman("exec", name, "id", "-u").strip() == "10001", name
        users = podman("top", name, "user").split()[1:]
        assert users and set(users) == {"om"}, (name, users)
        refused = run(["podman", "exec", name, "touch", "/home/om/x"], check=False)
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr, name
        assert podman("exec", name, "sh", "-c", "touch /tmp/x && echo ok").strip() == "ok"
    figures["image"] = {
        "name": SERVICE_IMAGE,
        "size_mb": round(image_size_mb(SERVICE_IMAGE), 1),
        "user": image["Config"]["User"],
    }
