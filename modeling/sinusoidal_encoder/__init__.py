"""sinusoidal_encoder: a Transformer encoder with the sinusoidal position encoding of "Attention Is All You Need".

Importing the package registers the config and every model class with the Auto classes of the config's `AUTO_MAP`
(which every saved `config.json` carries too), and marks them so that `save_pretrained` writes a Hub-ready folder
(code files and `auto_map`) that loads with `trust_remote_code=True` where this package is not installed.

An `AUTO_MAP` name transformers has no Auto class for (a head of this package alone, such as
`AutoModelForSpanClassification`) gets one here, an Auto class of transformers' own kind: `auto_class(name)` returns
it (`sinusoidal_encoder.AutoModelForSpanClassification` is the same class). Through it a folder loads as through
any other: this package's class where the package is installed, the folder's own code (its `auto_map` entry) with
`trust_remote_code=True`. The model classes' public names are those of `modeling_sinusoidal_encoder.__all__`.
"""

from collections import OrderedDict

import transformers
from transformers import AutoConfig
from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping

from . import modeling_sinusoidal_encoder
from .configuration_sinusoidal_encoder import AUTO_MAP, SinusoidalEncoderConfig
from .modeling_sinusoidal_encoder import *  # noqa: F403  (the classes of its `__all__`)

__version__ = "0.1.0"


def _own_auto_class(name: str) -> type:
    """An Auto class named `name` that transformers does not have, of its kind: `from_pretrained` and
    `from_config` resolve a config through what is registered with it, or through the config's `auto_map[name]`
    with `trust_remote_code=True`."""
    return type(name, (_BaseAutoModelClass,), {"_model_mapping": _LazyAutoMapping(OrderedDict(), OrderedDict())})


# the package's own Auto classes: one per AUTO_MAP name transformers lacks
OWN_AUTO_CLASSES = {
    name: _own_auto_class(name) for name in AUTO_MAP if name != "AutoConfig" and not hasattr(transformers, name)
}
globals().update(OWN_AUTO_CLASSES)


def auto_class(name: str) -> type:
    """The Auto class of an `AUTO_MAP` name: transformers' own, or this package's (`OWN_AUTO_CLASSES`)."""
    return OWN_AUTO_CLASSES[name] if name in OWN_AUTO_CLASSES else getattr(transformers, name)


# each Auto class of the config's AUTO_MAP and the model class it builds ("module.Class" names there)
AUTO_CLASSES = {
    auto_class(auto_name): getattr(modeling_sinusoidal_encoder, target.rpartition(".")[2])
    for auto_name, target in AUTO_MAP.items()
    if auto_name != "AutoConfig"
}

AutoConfig.register(SinusoidalEncoderConfig.model_type, SinusoidalEncoderConfig, exist_ok=True)
SinusoidalEncoderConfig.register_for_auto_class()
for _auto_class, _model_class in AUTO_CLASSES.items():
    _auto_class.register(SinusoidalEncoderConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)

__all__ = [
    "AUTO_CLASSES",
    "OWN_AUTO_CLASSES",
    "SinusoidalEncoderConfig",
    "auto_class",
    *OWN_AUTO_CLASSES,
    *modeling_sinusoidal_encoder.__all__,
]
