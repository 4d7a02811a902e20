"""sinusoidal_encoder: a Transformer encoder with the sinusoidal position encoding of "Attention Is All You Need".

Importing the package registers the config and every model class with transformers' Auto classes (those of the
config's `AUTO_MAP`, which every saved `config.json` carries too), and marks them so that `save_pretrained` writes a
Hub-ready folder (code files and `auto_map`) that loads with `trust_remote_code=True` where this package is not
installed.
"""

import transformers
from transformers import AutoConfig

from . import modeling_sinusoidal_encoder
from .configuration_sinusoidal_encoder import AUTO_MAP, SinusoidalEncoderConfig
from .modeling_sinusoidal_encoder import (
    SinusoidalEncoderForMaskedLM,
    SinusoidalEncoderForMultipleChoice,
    SinusoidalEncoderForQuestionAnswering,
    SinusoidalEncoderForSequenceClassification,
    SinusoidalEncoderForTokenClassification,
    SinusoidalEncoderModel,
    SinusoidalEncoderPreTrainedModel,
    sinusoidal_position_encoding,
)

__version__ = "0.1.0"

# each Auto class of the config's AUTO_MAP and the model class it builds ("module.Class" names there)
AUTO_CLASSES = {
    getattr(transformers, auto_name): getattr(modeling_sinusoidal_encoder, target.rpartition(".")[2])
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
    "SinusoidalEncoderConfig",
    "SinusoidalEncoderForMaskedLM",
    "SinusoidalEncoderForMultipleChoice",
    "SinusoidalEncoderForQuestionAnswering",
    "SinusoidalEncoderForSequenceClassification",
    "SinusoidalEncoderForTokenClassification",
    "SinusoidalEncoderModel",
    "SinusoidalEncoderPreTrainedModel",
    "sinusoidal_position_encoding",
]
