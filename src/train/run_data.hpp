// The datasets of a run and where they live (--data-in): IDX data decoded in
// memory or streamed from a disk cache, CIFAR in memory, image folders
// decoded from disk.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <memory>

#include "data/array_dataset.hpp"
#include "data/dataset.hpp"
#include "data/idx_stream.hpp"
#include "data/loader.hpp"
#include "data/text.hpp"
#include "data/tokenizer.hpp"
#include "models/model.hpp"
#include "train/options.hpp"
#include "fit/report.hpp"

namespace memfit::train {

// train and test point at the subsets when given, else at the bases; test
// is null when there is no test split. Moving it keeps them valid.
struct Datasets {
  std::unique_ptr<data::Dataset> train_base, test_base;
  // The caller's datasets (TrainOptions::train_dataset, test_dataset), held
  // for the run.
  std::shared_ptr<const data::Dataset> train_held, test_held;
  std::unique_ptr<data::Subset> train_sub, test_sub;
  const data::Dataset* train = nullptr;
  const data::Dataset* test = nullptr;
  bool idx = false;                                  // IDX files: --data-in applies
  data::StreamedIdxDataset* train_stream = nullptr;  // IDX streamed from disk (else in memory)
  data::StreamedIdxDataset* test_stream = nullptr;
  const data::ExternalDataset* external = nullptr;  // the caller's training data (in place, or its cache file)
  std::string images_note;  // images held in memory by another reader (CIFAR), for the plan's data row
  // A language model's text: its tokenizer (saved with the run) and what
  // was read, for the plan's data row.
  std::shared_ptr<const data::Tokenizer> tokenizer;
  std::string text_note;
  std::string token_cache;  // the token cache file read or written ("" when none could be written)
};

// The text models' default data, made by make deps-text from Debian's fortune
// packages (scripts/make_fortune_sets.py): a language model's is the
// English fortunes (deps/fortunes/en.txt), a text classifier's the topic
// classification set (deps/fortunes/topics/).
std::string default_lm_data();
std::string default_classifier_data();

// --data not given: a text model's default data rather than the image one.
void default_text_data(TrainOptions& o);

// The training and test sets of `o.data` (its subsets applied). A language
// model's data is text (data/text.hpp's read_corpus): its documents split
// into training and held-out parts by --val-fraction, tokenized (the
// tokenizer of --resume's run directory when it has one), random windows
// of --block-size to train on and fixed ones to evaluate. stream: IDX
// files open as StreamedIdxDatasets, reading only their labels and headers
// until prepare_streams(); otherwise they are decoded into memory. Throws
// std::runtime_error when there is no dataset there.
// A language model's tokens are read from the token cache
// (data/token_cache.hpp) when it holds them, else tokenized and written
// there; `log` (when given) gets one line saying which, and why an old
// cache was rebuilt or could not be written.
Datasets open_data(const TrainOptions& o, bool stream, std::ostream* log = nullptr);
// --task (when given) against what the model is: throws
// std::invalid_argument naming both when they differ.
void check_task(const TrainOptions& o, const models::Model& model);
// Builds or checks the disk caches of streamed datasets and opens them.
void prepare_streams(Datasets& d, std::ostream& log);
// Where the data lives, for the plan's "data pipeline" row and its JSON.
void describe_data(const Datasets& d, MemoryInputs& mi);
// What the data pipeline holds: the training loader with its dataset, the
// test loader with its dataset.
size_t data_bytes_of(const data::LoaderMemory& train, const data::LoaderMemory& test);

}  // namespace memfit::train
