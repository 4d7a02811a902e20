"""Where a training run stands (`TrainingProgress`): its steps, epoch, position in the epoch, tokens seen, and what
--load_best_model_at_end and --early_stopping_patience keep (`best_model`); saved in every checkpoint."""

from __future__ import annotations


class TrainingProgress:
    """Where training stands; saved in every checkpoint through `accelerator.register_for_checkpointing`."""

    def __init__(self) -> None:
        self.completed_steps = 0
        self.epoch = 0
        self.batches_in_epoch = 0  # micro-batches of `epoch` already consumed (per process)
        self.tokens_seen = 0
        # --load_best_model_at_end: the step of the best evaluation so far, its figure, and the evaluations since
        # one improved on the best (--early_stopping_patience) (`best_model`)
        self.best_step: int | None = None
        self.best_metric: float | None = None
        self.evaluations_without_improvement = 0

    def state_dict(self) -> dict[str, int | float | None]:
        return dict(vars(self))

    def load_state_dict(self, state: dict[str, int | float | None]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
