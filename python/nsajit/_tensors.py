"""torch tensor checks and the launch context (device, current stream). torch is imported on first use."""
import contextlib

_torch = None


def torch():
    global _torch
    if _torch is None:
        import torch as t  # imported on first use, so `import nsajit` works without torch

        _torch = t
    return _torch


def _is_tensor(x):
    return x is not None and type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _dtype_name(d):
    return str(d).replace("torch.", "")


def tensor(x, name, dtypes, ndim=None, shape=None, device=None, contiguous=False, inner_contiguous=False,
           optional=False):
    """Checks a tensor argument and returns it.

    dtypes: a dtype or a tuple; ndim: int or tuple of ints; shape: tuple with None for "any";
    device: the torch.device it must live on (else any CUDA device); contiguous: whole tensor;
    inner_contiguous: last dim stride 1. TypeError for a non-tensor or a wrong dtype, ValueError
    for device, shape, contiguity or stride.
    """
    if x is None:
        if optional:
            return None
        raise TypeError(f"nsajit: argument {name} is None: expected a torch.Tensor")
    if not _is_tensor(x):
        raise TypeError(f"nsajit: argument {name} is a {type(x).__name__}: expected a torch.Tensor")
    if not isinstance(dtypes, tuple):
        dtypes = (dtypes,)
    if x.dtype not in dtypes:
        raise TypeError(f"nsajit: argument {name} has dtype {_dtype_name(x.dtype)}: expected "
                        + " or ".join(_dtype_name(d) for d in dtypes))
    if x.device.type != "cuda":
        raise ValueError(f"nsajit: argument {name} is on device {x.device}: expected a CUDA tensor")
    if device is not None and x.device != device:
        raise ValueError(f"nsajit: argument {name} is on device {x.device}: expected {device} (as the other tensors)")
    if ndim is not None:
        allowed = ndim if isinstance(ndim, tuple) else (ndim,)
        if x.dim() not in allowed:
            raise ValueError(f"nsajit: argument {name} has shape {tuple(x.shape)}: expected "
                             + " or ".join(f"{d} dimensions" for d in allowed))
    if shape is not None:
        if x.dim() != len(shape) or any(s is not None and s != xs for s, xs in zip(shape, x.shape)):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"nsajit: argument {name} has shape {list(x.shape)}: expected {want}")
    if contiguous and not x.is_contiguous():
        raise ValueError(f"nsajit: argument {name} (shape {list(x.shape)}, strides {list(x.stride())}) "
                         "is not contiguous: expected a contiguous tensor")
    if inner_contiguous and x.dim() > 0 and x.shape[-1] > 1 and x.stride(-1) != 1:
        raise ValueError(f"nsajit: argument {name} has strides {list(x.stride())}: expected stride 1 in the last dimension")
    return x


def int_arg(value, name, low=None, high=None):
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numbers

            if isinstance(value, numbers.Integral) and not isinstance(value, bool):
                value = int(value)
            else:
                raise TypeError
        except TypeError:
            raise TypeError(f"nsajit: argument {name} = {value!r}: expected an int") from None
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "" if low is None else f"{low} <= "
        hi = "" if high is None else f" <= {high}"
        raise ValueError(f"nsajit: argument {name} = {value}: expected {lo}{name}{hi}")
    return value


def ptr(x):
    return None if x is None else x.data_ptr()


@contextlib.contextmanager
def launch_on(device):
    """Makes `device` current (its primary context, as torch uses) and yields the current torch
    stream's handle for it."""
    t = torch()
    with t.cuda.device(device):
        yield t.cuda.current_stream(device).cuda_stream
