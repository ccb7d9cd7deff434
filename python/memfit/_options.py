"""Keyword arguments -> the command's flags.

The package has no option table of its own: every keyword becomes the flag
of the same name (underscores as dashes) and goes through the command's
parser, so `memfit.train(update_in_backward=True, optimizer="adamw")` means
exactly `memfit train --update-in-backward --optimizer adamw`, and a typo is
the command's own usage error ("unknown flag --optimiser").
"""
import os


def to_argv(options):
    """argv for `options` (a dict), in the order given.

    True -> the bare flag; False and None -> left out (the command's default);
    a list or tuple -> the flag once per item (freeze=["layer1", "layer2"]);
    anything else -> its str() as the value (memory=512 * 2**20 is bytes).
    """
    argv = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        if not key.isidentifier() or key.startswith("_"):
            raise ValueError(f"memfit: '{key}' is not an option name")
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, _value(key, item)]
        else:
            argv += [flag, _value(key, value)]
    return argv


def _value(key, value):
    if isinstance(value, bool):
        raise ValueError(f"memfit: {key}={value!r}: a flag takes True or False, not inside a list")
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)
