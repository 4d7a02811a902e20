"""Tools users already have: transformers' Trainer and PEFT (LoRA), with no special casing."""

from __future__ import annotations

import json

import datasets
import pytest
import torch
from conftest import tiny_config
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    DataCollatorForLanguageModeling,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

import sinusoidal_encoder as se


def texts(n: int = 48) -> list[str]:
    from pydoc_data.topics import topics

    return [" ".join(t.split()[:60]) for _, t in sorted(topics.items())][:n]


def tokenized(tokenizer, labels: list[int] | None = None) -> datasets.Dataset:
    data = {"text": texts()}
    if labels is not None:
        data["label"] = labels
    dataset = datasets.Dataset.from_dict(data)
    return dataset.map(
        lambda b: tokenizer(b["text"], truncation=True, max_length=48), batched=True, remove_columns=["text"]
    )


def trainer_args(tmp_path, **overrides) -> TrainingArguments:
    values = dict(
        output_dir=str(tmp_path / "trainer"),
        max_steps=4,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        seed=0,
    )
    values.update(overrides)
    return TrainingArguments(**values)


def config_for(tokenizer, **overrides):
    return tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **overrides)


@pytest.mark.parametrize("sparse_prediction", [False, True])
def test_trainer_masked_lm(tmp_path, tokenizer, sparse_prediction):
    model = se.SinusoidalEncoderForMaskedLM(config_for(tokenizer, sparse_prediction=sparse_prediction))
    before = model.get_input_embeddings().weight.detach().clone()
    dataset = tokenized(tokenizer)
    trainer = Trainer(
        model=model,
        args=trainer_args(tmp_path),
        train_dataset=dataset,
        eval_dataset=dataset.select(range(16)),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
        processing_class=tokenizer,
    )
    result = trainer.train()
    assert result.global_step == 4 and torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(before, model.get_input_embeddings().weight)
    assert torch.isfinite(torch.tensor(trainer.evaluate()["eval_loss"]))
    trainer.save_model(str(tmp_path / "saved"))
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "saved", sparse_prediction=False).eval()
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["sparse_prediction"] is sparse_prediction
    ids = torch.tensor([dataset[0]["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, model.eval()(ids).logits)


def test_trainer_sequence_classification(tmp_path, tokenizer):
    model = se.SinusoidalEncoderForSequenceClassification(config_for(tokenizer, num_labels=2))
    dataset = tokenized(tokenizer, labels=[i % 2 for i in range(48)])
    trainer = Trainer(
        model=model,
        args=trainer_args(tmp_path),
        train_dataset=dataset,
        eval_dataset=dataset.select(range(16)),
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    trainer.train()
    metrics = trainer.evaluate()
    assert torch.isfinite(torch.tensor(metrics["eval_loss"]))
    predictions = trainer.predict(dataset.select(range(8)))
    assert predictions.predictions.shape == (8, 2)
    trainer.save_model(str(tmp_path / "saved"))
    assert isinstance(
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved"),
        se.SinusoidalEncoderForSequenceClassification,
    )


def test_num_items_in_batch_normalises_over_accumulated_batches(tokenizer):
    """Trainer passes the item count of the whole accumulation window; the loss is then sum / count."""
    model = se.SinusoidalEncoderForMaskedLM(config_for(tokenizer)).eval()
    ids = torch.randint(10, len(tokenizer), (2, 12))
    labels = torch.full_like(ids, -100)
    labels[:, ::3] = ids[:, ::3]
    mean = model(ids, labels=labels).loss
    torch.testing.assert_close(model(ids, labels=labels, num_items_in_batch=16).loss, mean * 8 / 16)


def test_peft_lora_train_save_reload_and_merge(tmp_path, tokenizer):
    peft = pytest.importorskip("peft", reason="peft is not installed")
    base_folder = tmp_path / "base"
    se.SinusoidalEncoderForSequenceClassification(config_for(tokenizer, num_labels=2)).save_pretrained(base_folder)
    base = AutoModelForSequenceClassification.from_pretrained(base_folder)
    lora = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["qkv", "out_proj", "dense_in", "dense_out"],
        task_type="SEQ_CLS",
        lora_dropout=0.0,
    )
    model = peft.get_peft_model(base, lora)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and all("lora" in n or "classifier" in n for n in trainable)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    batch = tokenizer(texts(8), padding=True, truncation=True, max_length=32, return_tensors="pt")
    labels = torch.tensor([0, 1] * 4)
    model.train()
    for _ in range(3):
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        expected = model(**batch).logits
    model.save_pretrained(tmp_path / "adapter")
    fresh = AutoModelForSequenceClassification.from_pretrained(base_folder)
    reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, expected)
        merged = reloaded.merge_and_unload()
        assert isinstance(merged, se.SinusoidalEncoderForSequenceClassification)
        torch.testing.assert_close(merged(**batch).logits, expected, atol=1e-5, rtol=1e-5)


def test_sentence_transformers_loads_an_exported_folder(tmp_path, tokenizer):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")
    from sinusoidal_encoder_training.publishing.export import save_tokenizer, write_sentence_transformers_files

    model = se.SinusoidalEncoderModel(config_for(tokenizer)).eval()
    model.save_pretrained(tmp_path)
    save_tokenizer(tokenizer, str(tmp_path))
    write_sentence_transformers_files(str(tmp_path), model.config)
    encoder = sentence_transformers.SentenceTransformer(str(tmp_path), device="cpu")
    assert encoder.max_seq_length == model.config.max_position_embeddings == 64  # truncates at the trained length
    sentences = ["The function returns a list.", "Open the file for reading, then close it again."]
    embeddings = encoder.encode(sentences, convert_to_tensor=True)
    assert embeddings.shape == (2, model.config.hidden_size)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    expected = (hidden * weights).sum(1) / weights.sum(1)  # transformer + mean pooling, by hand
    torch.testing.assert_close(embeddings, expected, atol=1e-5, rtol=1e-5)


def test_similarity_check_scores_are_cosines_of_mean_pooled_embeddings(tmp_path, tokenizer):
    """benchmarks/sentence_embeddings/run.py on an exported folder: one (paraphrase, unrelated) pair of cosine
    similarities per hand-checked triple, equal to transformer + mean pooling done by hand. (Whether a model ranks the
    paraphrases first depends on its training: tests/training/stages/test_sentence_embeddings.py tests that.)"""
    pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")
    from benchmarks.sentence_embeddings import run as similarity_check
    from sinusoidal_encoder_training.publishing.export import save_tokenizer, write_sentence_transformers_files

    model = se.SinusoidalEncoderModel(config_for(tokenizer)).eval()
    model.save_pretrained(tmp_path)
    save_tokenizer(tokenizer, str(tmp_path))
    write_sentence_transformers_files(str(tmp_path), model.config)
    results = tmp_path / "results.jsonl"
    scores = similarity_check.main([str(tmp_path), "--results", str(results), "--label", "a random model"])
    assert len(scores) == len(similarity_check.ALL_TRIPLES) == 16
    (line,) = [json.loads(text) for text in results.read_text().splitlines()]  # what the tables are made from
    assert line["label"] == "a random model" and line["scores"] == [[round(a, 6), round(b, 6)] for a, b in scores]
    assert line["shared_word"]["of"] == 8 and line["low_overlap"]["of"] == 8 and line["all"]["of"] == 16
    ranked = sum(similar > other for similar, other in scores[:8])
    assert line["shared_word"]["ranked"] == ranked
    anchor, paraphrase, unrelated = similarity_check.TRIPLES[0]
    batch = tokenizer([anchor, paraphrase, unrelated], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * weights).sum(1) / weights.sum(1)
    cosine = torch.nn.functional.cosine_similarity
    expected = (float(cosine(pooled[0], pooled[1], dim=0)), float(cosine(pooled[0], pooled[2], dim=0)))
    assert scores[0] == pytest.approx(expected, abs=1e-5)


def test_similarity_check_random_init_scores_a_fresh_model_of_the_same_config(tmp_path, tokenizer):
    """--random_init SEED replaces the folder's weights by those a fresh model of its config gets with SEED (the
    untrained baseline of the sentence-embeddings table), and the results file says so."""
    pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")
    from benchmarks.sentence_embeddings import run as similarity_check
    from sinusoidal_encoder_training.publishing.export import save_tokenizer, write_sentence_transformers_files

    torch.manual_seed(1)
    saved = se.SinusoidalEncoderModel(config_for(tokenizer)).eval()
    saved.save_pretrained(tmp_path)
    save_tokenizer(tokenizer, str(tmp_path))
    write_sentence_transformers_files(str(tmp_path), saved.config)
    torch.manual_seed(7)
    fresh = se.SinusoidalEncoderModel(config_for(tokenizer)).eval()
    fresh.save_pretrained(tmp_path / "fresh")
    save_tokenizer(tokenizer, str(tmp_path / "fresh"))
    write_sentence_transformers_files(str(tmp_path / "fresh"), fresh.config)

    results = tmp_path / "results.jsonl"
    argv = [str(tmp_path), "--random_init", "7", "--results", str(results), "--label", "x"]
    reinitialised = torch.tensor(similarity_check.main(argv))
    torch.testing.assert_close(reinitialised, torch.tensor(similarity_check.main([str(tmp_path / "fresh")])))
    assert not torch.allclose(reinitialised, torch.tensor(similarity_check.main([str(tmp_path)])))
    assert json.loads(results.read_text())["model"] == f"{tmp_path} --random_init 7"


def test_similarity_check_names_a_missing_folder_in_one_line(capsys):
    from benchmarks.sentence_embeddings import run as similarity_check

    with pytest.raises(SystemExit):
        similarity_check.main(["/no/such/folder"])
    err = capsys.readouterr().err
    assert "MODEL '/no/such/folder': no such file or folder." in err and "Traceback" not in err
