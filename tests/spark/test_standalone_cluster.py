"""The exactly-once sink on a real Spark standalone cluster: a master and two workers started
with ``spark-class`` (as an operator starts them), the workers on two loopback addresses so
that Spark sees two hosts and may run a speculative copy of a slow task on the other one.
With speculation on, a task whose first attempt stored its rows and then stalls gets a
copy; whichever attempt Spark keeps, every row is in the topic exactly once and the other
attempt's transaction is aborted (readers are not held back afterwards)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.broker.brokerproc import wait_until
from tests.broker.conftest import ThreadedBroker
from tests.ports import free_port
from tests.spark import eo_hooks
from tests.spark.conftest import new_topic
from tests.spark.test_exactly_once import eo, shuffled_rows, values_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HOSTS = ("127.0.0.2", "127.0.0.3")  # the two workers' hosts (loopback: 127/8 is local)


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _start(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:  # its own process group: its executors die with it
        return subprocess.Popen([str(spark_class()), *argv], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """spark://127.0.0.1:PORT with two workers of 2 cores each, on two hosts."""
    if not os.access(spark_class(), os.X_OK):
        pytest.skip(f"{spark_class()} is not executable (pyspark without its scripts)")
    root = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_DIRS": str(root),
           "SPARK_NO_DAEMONIZE": "1"}
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs = [_start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(port), "--webui-port", str(free_port())],
                    root / "master.log", env)]
    try:
        wait_until(lambda: "Starting Spark master" in (root / "master.log").read_text()
                   or procs[0].poll() is not None, 120, "the Spark master")
        assert procs[0].poll() is None, (root / "master.log").read_text()[-3000:]
        for host in HOSTS:
            work = root / f"work-{host}"
            work.mkdir()
            procs.append(_start(["org.apache.spark.deploy.worker.Worker", "--host", host,
                                 "--cores", "2", "--memory", "1g", "--webui-port", "0",
                                 "--work-dir", str(work), master_url],
                                root / f"worker-{host}.log", env))
        wait_until(lambda: all("Successfully registered with master"
                               in (root / f"worker-{h}.log").read_text() for h in HOSTS)
                   or any(p.poll() is not None for p in procs), 180, "two Spark workers")
        assert all(p.poll() is None for p in procs), "\n".join(
            (root / f"worker-{h}.log").read_text()[-2000:] for h in HOSTS)
        yield master_url
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture(scope="module")
def spark(cluster: str) -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(cluster)
        .appName("magnetar-spark-cluster-eo")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "2")
        .config("spark.cores.max", "4")
        .config("spark.task.maxFailures", "4")
        .config("spark.sql.streaming.pythonDataSource.enabled", "true")
        # speculation on, eagerly: a task running well past its siblings gets a copy
        .config("spark.speculation", "true")
        .config("spark.speculation.interval", "200ms")
        .config("spark.speculation.quantile", "0.5")
        .config("spark.speculation.multiplier", "1.5")
        .config("spark.speculation.minTaskRuntime", "1s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")
    eo_hooks.register(session)
    try:
        yield session
    finally:
        session.stop()


def test_exactly_once_on_a_standalone_cluster_with_speculation(
        spark, broker: ThreadedBroker, official: pulsar.Client, tmp_path: Path) -> None:
    topic = new_topic("cluster-eo")
    broker.call(broker.service.create_partitioned_topic, topic, 2)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "slow-1").touch()  # its first attempt stalls after storing its rows
    n = 6000
    df = shuffled_rows(spark, n, 4)
    df.write.format("pulsar-hooked").options(**eo(broker, topic)) \
        .option("hooks", str(hooks)).mode("append").save()
    # Spark ran a copy of the slow task and both attempts stored their rows
    assert (hooks / "stored-1-0").exists() and list(hooks.glob("done-1-*")), \
        sorted(p.name for p in hooks.iterdir())
    got = values_of(official, topic, 2)
    assert len(got) == n and set(got) == {b"r%d" % i for i in range(n)}
    # the loser's transaction is over: a new plain message is readable at once
    producer = official.create_producer(f"{topic}-partition-0")
    producer.send(b"after")
    assert values_of(official, topic, 2).count(b"after") == 1
