"""``magnetar standalone``: build the broker configuration and run the service until a signal."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from magnetar.broker.config import BrokerConfig, ConfigError


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    overrides = {
        "magnetarDataDir": args.data_dir,
        "brokerServicePort": args.port,
        "webServicePort": args.http_port,
        "bindAddress": args.bind_address,
        "magnetarFsyncPolicy": args.fsync,
    }
    return BrokerConfig.load(args.config, **overrides)


def run_standalone(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"magnetar: {exc}", file=sys.stderr)
        return 2
    from magnetar.broker.service import BrokerService, install_event_loop_policy

    install_event_loop_policy()

    async def serve() -> None:
        service = BrokerService(config)
        try:
            await service.start()
        except OSError as exc:
            print(
                f"magnetar: cannot listen on {config.bindAddress}:{config.brokerServicePort}: "
                f"{exc.strerror}. Is another broker running? Pick another --port.",
                file=sys.stderr,
            )
            raise SystemExit(1) from exc
        print(
            f"magnetar standalone: serving pulsar://{config.advertisedAddress or 'localhost'}:"
            f"{service.port} (data in {config.magnetarDataDir}, fsync {config.fsync_policy})",
            file=sys.stderr,
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await service.stop()

    asyncio.run(serve())
    return 0
