"""The entry wrapper: turns a module with `run(args) -> str` into the `experiment`
world's export, so that any exception reaches the user as its Python traceback (the
export returns `err(traceback)`; the host prints it and exits with code 1) instead of
trapping the guest. `raise Failure("...")` fails with just the message (a Rust
guest's `Err(message)`); returning a string (or None) succeeds.

`mxhost run script.py` generates the entry module for you. To build a component by
hand, end your script with

    WitWorld = mxhost_guest.export_experiment(run)

and run `componentize-py -d wit -w experiment -p guest-sdk-py -p . componentize script`.
"""

import importlib
import sys
import traceback

import wit_world
from componentize_py_types import Err


class Failure(Exception):
    """Raise `Failure("message")` to fail the experiment with just this message and no
    traceback (what returning `Err(message)` does in a Rust guest); exit code 1."""


def _flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001 - flushing must never fail the run
            pass


#: Guest path prefix → host path prefix, for file names in tracebacks (set by the
#: entry module mxhost generates; componentize-py mounts each `-p` directory as /N/).
_PATHS = {}


def _describe(exc):
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code.co_name == "_call" and tb.tb_next is not None:
        exc = exc.with_traceback(tb.tb_next)  # hide the wrapper's own frame
    text = "".join(traceback.format_exception(exc))
    for guest, host in _PATHS.items():
        text = text.replace(f'File "{guest}', f'File "{host}')
    value = getattr(exc, "value", None)
    if isinstance(exc, Err) and value is not None:
        from . import error_text
        text += f"host error: {error_text(value)}\n"
    return "Python exception in the experiment:\n" + text.rstrip("\n")


def _call(run, args):
    try:
        result = run(list(args))
    except Failure as e:
        raise Err(str(e)) from None
    except BaseException as e:  # noqa: BLE001 - everything, even SystemExit, becomes err
        raise Err(_describe(e)) from None
    finally:
        _flush()
    return "" if result is None else str(result)


def export_experiment(run):
    """The `WitWorld` class for a `run(args) -> str` function."""

    class WitWorld(wit_world.WitWorld):
        def run(self, args):
            return _call(run, args)

    return WitWorld


def _keep_sources(module_name):
    """Put the source of the script, its sibling modules and the SDK into `linecache`,
    so tracebacks at run time show code lines (the sandboxed guest cannot read files;
    at build time, when this runs, the files are readable)."""
    import linecache
    import os

    roots = []
    for name in (module_name, __package__):
        f = getattr(sys.modules.get(name), "__file__", None)
        if f:
            roots.append(os.path.dirname(f) + os.sep)
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if not f or not f.endswith(".py") or not any(f.startswith(r) for r in roots):
            continue
        try:
            with open(f, encoding="utf-8") as fh:
                lines = fh.readlines()
        except OSError:
            continue
        linecache.cache[f] = (sum(map(len, lines)), None, lines, f)


def load_script(module_name, paths=None):
    """The `WitWorld` class for a script module with a `run(args)` function. The import
    happens now (at component build time, so top-level code is pre-initialised); an
    import-time exception or a missing `run` is reported when the experiment runs.
    `paths` maps guest path prefixes to host ones for tracebacks."""
    _PATHS.update(paths or {})
    try:
        module = importlib.import_module(module_name)
        run = getattr(module, "run", None)
        if run is None:
            raise AttributeError(
                f"{module_name}.py defines no `run(args)` function; an experiment "
                "script must define `def run(args): ... return summary`")
        if not callable(run):
            raise TypeError(f"{module_name}.run is not a function")
        try:
            _keep_sources(module_name)
        except Exception:  # noqa: BLE001 - only a nicer traceback is at stake
            pass
    except BaseException as e:  # noqa: BLE001
        message = _describe(e)
        _flush()

        class Failed(wit_world.WitWorld):
            def run(self, args):
                raise Err(message)

        return Failed
    return export_experiment(run)
