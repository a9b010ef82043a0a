"""The names of a world's files on disk, by part: below every module that writes, checks, installs or
reads them."""

# On disk a world has two parts: the test part (what the benchmark reads), complete once
# TEST_MANIFEST is written, and the train split, complete once MANIFEST (the whole world) is.
TEST_FILES = (
    "test_corpus.npy",
    "test_refs.npy",
    "test_intents.jsonl",
    "test_queries.jsonl",
    "compositional_intents.jsonl",
    "compositional_queries.jsonl",
    "test_captions.jsonl",
)
TRAIN_FILES = (
    "train_scenes.npy",
    "train_intents.jsonl",
    "train_triplets.jsonl",
    "train_captions.jsonl",
    "validation_scenes.npy",
    "validation_intents.jsonl",
)
DATA_FILES = TEST_FILES + TRAIN_FILES
MANIFEST = "manifest.json"
TEST_MANIFEST = "test_manifest.json"
