#include "train/run_data.hpp"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <stdexcept>

#include "data/cifar.hpp"
#include "data/idx.hpp"
#include "data/image_folder.hpp"
#include "data/text_classes.hpp"
#include "data/token_cache.hpp"
#include "data/tokenizer.hpp"
#include "memfit/rng.hpp"
#include "models/model.hpp"
#include "base/bytes.hpp"

namespace fs = std::filesystem;

namespace memfit::train {
namespace {

bool has_idx(const std::string& dir) {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"})
    if (fs::exists(fs::path(dir) / f)) return true;
  return false;
}

std::string gpt2_ranks_of(const TrainOptions& o) {
  return o.gpt2_ranks.empty() ? data::built_in_gpt2_ranks() : o.gpt2_ranks;
}

// The run's tokenizer: the one saved in --resume's run directory, else
// --tokenizer's, built over the texts for char.
std::shared_ptr<const data::Tokenizer> open_tokenizer(const TrainOptions& o, const std::vector<std::string_view>& texts) {
  const fs::path saved = o.resume.empty() ? fs::path() : fs::path(o.resume) / "tokenizer.json";
  if (!saved.empty() && fs::exists(saved)) return data::load_tokenizer(saved.string());
  return data::make_tokenizer(o.tokenizer, texts, o.data, gpt2_ranks_of(o));
}

std::string vocabulary_note(const data::Tokenizer& t) {
  return t.kind() == "char" ? "a " + std::to_string(t.vocab_size()) + "-character alphabet"
                            : t.kind() + " tokens (vocabulary " + std::to_string(t.vocab_size()) + ")";
}

// The windows over a language model's token streams, and the plan's note.
void set_text(const TrainOptions& o, int64_t block, std::shared_ptr<const data::Tokenizer> tok,
              std::shared_ptr<const std::vector<int32_t>> train_tokens,
              std::shared_ptr<const std::vector<int32_t>> val_tokens, size_t files, size_t documents, size_t held_out,
              Datasets& d) {
  const int64_t vocab = static_cast<int64_t>(tok->vocab_size());
  d.train_base = std::make_unique<data::TokenWindows>(train_tokens, block, vocab, o.seed);
  const size_t n_val = val_tokens ? val_tokens->size() : 0;
  if (static_cast<int64_t>(n_val) > block) d.test_base = std::make_unique<data::TokenWindows>(val_tokens, block, vocab);
  d.tokenizer = std::move(tok);
  d.text_note = std::to_string(files) + (files == 1 ? " file, " : " files, ") + std::to_string(documents) +
                " documents (" + std::to_string(held_out) + " held out), " + std::to_string(train_tokens->size()) +
                " + " + std::to_string(n_val) + " tokens, " + vocabulary_note(*d.tokenizer);
}

// The token cache's copy of a corpus, when it holds one that checks out
// (why: what was wrong with it, "" for no file).
std::optional<data::TokenCacheData> cached_tokens(const std::string& path, const data::TokenCacheKey& key,
                                                  std::shared_ptr<const data::Tokenizer>& tok, std::string& why) {
  std::optional<data::TokenCacheData> c = data::read_token_cache(path, key, why);
  if (!c) return c;
  try {
    std::shared_ptr<const data::Tokenizer> t = tok ? tok : data::parse_tokenizer(c->tokenizer, path);
    const auto vocab = static_cast<int32_t>(t->vocab_size());
    for (const auto* v : {c->train.get(), c->held_out.get()})
      if (std::any_of(v->begin(), v->end(), [vocab](int32_t id) { return id < 0 || id >= vocab; }))
        throw std::runtime_error("a token id outside the vocabulary");
    tok = std::move(t);
  } catch (const std::exception& e) {
    why = e.what();
    c.reset();
  }
  return c;
}

// A language model's text data: its tokens from the token cache
// (data/token_cache.hpp) when it has them, else read, split, tokenized and
// written there.
void open_text(const TrainOptions& o, const models::Model& model, Datasets& d, std::ostream* log) {
  if (!fs::exists(o.data))
    throw std::runtime_error("no text at " + o.data +
                             (o.data == default_lm_data() ? ": make deps-text makes it (from the Debian packages fortunes and fortunes-min), or pass --data FILE.txt|DIR"
                                                          : ": pass --data with a text file or a directory of text files"));
  const int64_t block = o.block_size > 0 ? o.block_size : model.max_sequence;
  if (block <= 0)
    throw std::invalid_argument("model '" + o.model + "' has no sequence length of its own: pass --block-size");
  if (model.max_sequence > 0 && block > model.max_sequence)
    throw std::invalid_argument("--block-size " + std::to_string(block) + " is longer than model '" + o.model +
                                "' takes (" + std::to_string(model.max_sequence) + " tokens)");
  // The tokenizer, when it does not depend on the text (the run's saved
  // one, gpt2, wordpiece): part of the cache's key by its saved form. The
  // char tokenizer built over the corpus is a function of the corpus, which
  // the key holds; its saved form is in the cache.
  std::shared_ptr<const data::Tokenizer> tok;
  const fs::path saved = o.resume.empty() ? fs::path() : fs::path(o.resume) / "tokenizer.json";
  if (!saved.empty() && fs::exists(saved)) tok = data::load_tokenizer(saved.string());
  else if (o.tokenizer != "char") tok = data::make_tokenizer(o.tokenizer, {}, o.data, gpt2_ranks_of(o));
  std::string identity = "char:corpus";
  if (tok) {
    const std::string form = tok->saved();
    identity = tok->kind() + ":" + data::hex16(rng::fnv1a(rng::kFnvOffset, form.data(), form.size()));
  }
  const data::TokenCacheKey key = data::token_cache_key(o.data, identity, o.val_fraction, o.seed);
  const std::string cache = data::token_cache_path(key, o.cache_dir);
  std::string why;
  if (std::optional<data::TokenCacheData> c = cached_tokens(cache, key, tok, why)) {
    if (log) *log << "memfit: tokens: cache hit " << cache << "\n";
    d.token_cache = cache;
    set_text(o, block, std::move(tok), std::move(c->train), std::move(c->held_out), c->files, c->documents,
             c->held_out_documents, d);
    return;
  }
  // Each step frees what the next no longer needs: loading peaks at the
  // text twice (documents, then joined) or once plus its token ids, before
  // the plan's arenas exist.
  data::Corpus corpus = data::read_corpus(o.data);
  const size_t files = corpus.files.size(), documents = corpus.documents.size();
  data::EntrySplit split = data::split_entries(std::move(corpus.documents), o.val_fraction, o.seed);
  const size_t held_out = split.held_out.size();
  // Documents end with a blank line (join_entries); a tokenizer with an
  // end-of-text token (gpt2) ends each with it instead, as GPT-2 was trained.
  auto tokens_of = [&](std::vector<std::string>& docs) {
    auto ids = std::make_shared<std::vector<int32_t>>();
    if (docs.empty()) return ids;
    if (tok->eot_id() >= 0) {
      for (std::string& doc : docs) {
        const std::vector<int32_t> v = tok->encode(doc, o.data);
        ids->insert(ids->end(), v.begin(), v.end());
        ids->push_back(tok->eot_id());
        doc = {};
      }
    } else {
      const std::string text = data::join_entries(docs);
      docs = {};
      *ids = tok->encode(text, o.data);
    }
    docs = {};
    // Exactly its tokens, as a cache read holds them: the plan's data row
    // (TokenWindows' resident bytes) is the same either way.
    ids->shrink_to_fit();
    return ids;
  };
  if (!tok) {
    std::vector<std::string_view> all{"\n"};  // the separator join_entries adds
    for (const auto* part : {&split.train, &split.held_out})
      for (const std::string& doc : *part) all.push_back(doc);
    tok = data::make_tokenizer("char", all, o.data);
  }
  data::TokenCacheData c;
  c.train = tokens_of(split.train);
  c.held_out = tokens_of(split.held_out);
  c.files = files;
  c.documents = documents;
  c.held_out_documents = held_out;
  c.tokenizer = tok->saved();
  try {
    const std::vector<std::string> stale = data::write_token_cache(cache, key, c);
    d.token_cache = cache;
    if (log) {
      *log << "memfit: tokenized " << o.data << " (" << c.train->size() + c.held_out->size() << " tokens) -> cache "
           << cache << (why.empty() ? "" : " (the old cache was unusable: " + why + "; rebuilt)") << "\n";
      for (const std::string& f : stale)
        *log << "memfit: deleted the stale token cache " << f << " (the same corpus, tokenizer and split before the "
             << "corpus changed)\n";
    }
  } catch (const std::exception& e) {
    if (log)
      *log << "memfit: warning: tokenized " << o.data << " but could not write the token cache (" << e.what()
           << "); training goes on from memory\n";
  }
  c.tokenizer = {};
  set_text(o, block, std::move(tok), std::move(c.train), std::move(c.held_out), files, documents, held_out, d);
}

void open_labelled_texts(const TrainOptions& o, const models::Model& model, data::LabelledTexts train,
                         data::LabelledTexts test, bool split, Datasets& d);

// A text classifier's data: labelled texts (data/text_classes.hpp). A file
// is split by --val-fraction; a folder holding train.jsonl or train.csv
// (and test.* or val.*) is taken as split; another folder is a folder per
// class, split by --val-fraction, or train/ and test/ folders per class.
void open_labelled(const TrainOptions& o, const models::Model& model, Datasets& d) {
  data::LabelledTexts train, test;
  bool split = false;
  if (o.train_texts) {
    // The caller's texts: copied (tokenizing consumes its copy), the
    // caller's own stay as they are.
    if (o.test_texts) {
      train = *o.train_texts;
      test = *o.test_texts;
      split = true;
    } else {
      data::LabelledSplit s = data::split_labelled(*o.train_texts, o.val_fraction, o.seed);
      train = std::move(s.train);
      test = std::move(s.held_out);
    }
    open_labelled_texts(o, model, std::move(train), std::move(test), split, d);
    return;
  }
  if (!fs::exists(o.data))
    throw std::runtime_error("no labelled text at " + o.data +
                             (o.data == default_classifier_data() ? ": make deps-text makes it (from the Debian fortune packages), or pass --data"
                                                                  : ": pass --data with a .jsonl or .csv file, or a folder with a folder per class"));
  const data::CsvColumns columns = data::parse_csv_columns(o.csv_columns);
  auto find = [&](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names)
      if (fs::exists(fs::path(o.data) / n)) return (fs::path(o.data) / n).string();
    return "";
  };
  const std::string tr = fs::is_directory(o.data) ? find({"train.jsonl", "train.csv", "train"}) : "";
  if (!tr.empty()) {
    train = data::read_labelled(tr, columns);
    const std::string te = find({"test.jsonl", "test.csv", "val.jsonl", "val.csv", "test", "val"});
    if (!te.empty()) test = data::read_labelled(te, columns);
    split = true;
  } else {
    data::LabelledSplit s = data::split_labelled(data::read_labelled(o.data, columns), o.val_fraction, o.seed);
    train = std::move(s.train);
    test = std::move(s.held_out);
  }
  open_labelled_texts(o, model, std::move(train), std::move(test), split, d);
}

void open_labelled_texts(const TrainOptions& o, const models::Model& model, data::LabelledTexts train,
                         data::LabelledTexts test, bool split, Datasets& d) {
  const std::vector<std::string> names = data::class_names_of({&train, &test});
  if (names.size() < 2)
    throw std::runtime_error(o.data + ": the examples have " + std::to_string(names.size()) +
                             " class; a classifier needs two or more");
  std::vector<std::string_view> parts(train.texts.begin(), train.texts.end());
  parts.insert(parts.end(), test.texts.begin(), test.texts.end());
  const std::shared_ptr<const data::Tokenizer> tok = open_tokenizer(o, parts);
  parts.clear();
  // BERT's tokenizer frames each text as [CLS] text [SEP].
  const bool framed = tok->cls_id() >= 0 && tok->sep_id() >= 0;
  const int64_t limit = model.max_sequence > 0 ? model.max_sequence : INT64_MAX;
  if (o.max_len > limit)
    throw std::invalid_argument("--max-len " + std::to_string(o.max_len) + " is longer than model '" + o.model +
                                "' takes (" + std::to_string(limit) + " tokens)");
  const int64_t vocab = static_cast<int64_t>(tok->vocab_size());
  std::map<std::string, int32_t> class_of;
  for (size_t c = 0; c < names.size(); ++c) class_of[names[c]] = static_cast<int32_t>(c);
  struct Encoded {
    std::vector<std::vector<int32_t>> ids;
    std::vector<int32_t> labels;
  };
  size_t longest = 0;
  auto encode = [&](data::LabelledTexts& t) {
    Encoded e{std::vector<std::vector<int32_t>>(t.size()), std::vector<int32_t>(t.size())};
    for (size_t i = 0; i < t.size(); ++i) {
      e.ids[i] = tok->encode(t.texts[i], t.source);
      e.labels[i] = class_of.at(t.labels[i]);
      longest = std::max(longest, e.ids[i].size() + (framed ? 2 : 0));
    }
    t = {};
    return e;
  };
  const size_t n_train = train.size(), n_test = test.size();
  Encoded tr_ids = encode(train), te_ids = encode(test);
  // Without --max-len: the longest example, up to 128 (and the model's
  // limit): short texts are not padded to a length none of them has.
  const int64_t max_len =
      o.max_len > 0 ? o.max_len : std::min<int64_t>({static_cast<int64_t>(longest), 128, limit});
  size_t framed_cut = 0;  // training examples cut when framed (TokenizedTexts then sees them fit)
  if (framed)
    for (Encoded* e : {&tr_ids, &te_ids})
      for (auto& ids : e->ids) {
        if (e == &tr_ids) framed_cut += static_cast<int64_t>(ids.size()) + 2 > max_len;
        ids = data::with_cls_sep(*tok, ids, static_cast<size_t>(max_len));
      }
  const int32_t pad = tok->pad_id() >= 0 ? tok->pad_id() : 0;
  auto tr_set = std::make_unique<data::TokenizedTexts>(tr_ids.ids, std::move(tr_ids.labels), max_len, vocab, names, pad);
  tr_ids.ids = {};
  const size_t cut = tr_set->truncated() + framed_cut;
  d.train_base = std::move(tr_set);
  if (n_test) d.test_base = std::make_unique<data::TokenizedTexts>(te_ids.ids, std::move(te_ids.labels), max_len, vocab, names, pad);
  d.tokenizer = std::move(tok);
  d.text_note = std::to_string(n_train) + " + " + std::to_string(n_test) + " examples" +
                (split ? "" : " (held out by --val-fraction)") + ", " + std::to_string(names.size()) + " classes, " +
                std::to_string(max_len) + " tokens each" + (cut ? " (" + std::to_string(cut) + " truncated)" : "") +
                ", " + vocabulary_note(*d.tokenizer);
}

// MNIST-style IDX files, CIFAR's archives or an image folder.
void open_images(const TrainOptions& o, bool stream, Datasets& d) {
  if (!fs::exists(o.data))
    throw std::runtime_error("dataset not found at " + o.data +
                             (o.data == data::kFashionMnistDir ? ": install the Debian package dataset-fashion-mnist (make run and make deps-run do) or pass --data DIR"
                                                                : ": pass --data with an IDX directory, a CIFAR folder or an image folder"));
  if (std::optional<data::CifarLayout> cifar = data::find_cifar(o.data)) {
    // 3x32x32 as stored: --image-size and --channels resize image folders only.
    if ((o.image_size && o.image_size != 32) || (o.channels && o.channels != 3))
      throw std::invalid_argument(cifar->describe() + " images are 3 x 32 x 32; --image-size and --channels resize "
                                  "image folders only: leave them out");
    data::CifarOptions co;
    co.coarse = o.cifar100_labels == "coarse";
    if (co.coarse && cifar->kind != data::CifarKind::Cifar100)
      throw std::invalid_argument("--cifar100-labels coarse: " + cifar->dir + " is CIFAR-10, which has one set of labels");
    d.train_base = std::make_unique<data::CifarDataset>(data::CifarDataset::open(*cifar, "train", co));
    d.test_base = std::make_unique<data::CifarDataset>(data::CifarDataset::open(*cifar, "test", co));
    d.images_note = cifar->describe() + " in memory as uint8";
  } else if (has_idx(o.data)) {
    d.idx = true;
    if (stream) {
      data::StreamOptions so;
      so.cache_dir = o.cache_dir;
      so.prepare = false;
      auto tr = std::make_unique<data::StreamedIdxDataset>(data::StreamedIdxDataset::open(o.data, "train", {}, so));
      auto te = std::make_unique<data::StreamedIdxDataset>(data::StreamedIdxDataset::open(o.data, "t10k", {}, so));
      d.train_stream = tr.get();
      d.test_stream = te.get();
      d.train_base = std::move(tr);
      d.test_base = std::move(te);
    } else {
      d.train_base = std::make_unique<data::IdxDataset>(data::IdxDataset::open(o.data, "train"));
      d.test_base = std::make_unique<data::IdxDataset>(data::IdxDataset::open(o.data, "t10k"));
    }
  } else if (fs::is_directory(fs::path(o.data) / "train")) {
    data::ImageFolderOptions io;
    io.channels = o.channels ? static_cast<int>(o.channels) : 3;
    io.height = io.width = o.image_size ? static_cast<int>(o.image_size) : 32;
    d.train_base = std::make_unique<data::ImageFolderDataset>((fs::path(o.data) / "train").string(), io);
    fs::path test = fs::path(o.data) / "test";
    if (!fs::is_directory(test)) test = fs::path(o.data) / "val";
    if (fs::is_directory(test)) d.test_base = std::make_unique<data::ImageFolderDataset>(test.string(), io);
  } else {
    throw std::runtime_error("no dataset recognised at " + o.data +
                             ": expected MNIST-style IDX files (train-images-idx3-ubyte[.gz], ...), CIFAR-10/100 as "
                             "their archives unpack (cifar-10-batches-py/, cifar-100-python/, cifar-10-batches-bin/, "
                             "cifar-100-binary/, or their parent folder), or an image folder with train/<class>/ (and "
                             "test/<class>/) subfolders");
  }
}

}  // namespace

std::string default_lm_data() { return std::string(MEMFIT_DEPS_DIR) + "/fortunes/en.txt"; }
std::string default_classifier_data() { return std::string(MEMFIT_DEPS_DIR) + "/fortunes/topics"; }

void default_text_data(TrainOptions& o) {
  const bool given = std::find(o.given.begin(), o.given.end(), "data") != o.given.end();
  if (given || o.data != data::kFashionMnistDir) return;
  try {
    const std::shared_ptr<const models::Model> m = o.resolved_model();
    if (m->task == models::Task::LanguageModel) o.data = default_lm_data();
    else if (std::any_of(m->inputs.begin(), m->inputs.end(), [](const models::InputDecl& in) { return in.name == "tokens"; }))
      o.data = default_classifier_data();
  } catch (const std::exception&) {
    // a bad model name is reported where the model is built
  }
}

void check_task(const TrainOptions& o, const models::Model& model) {
  if (o.task.empty()) return;
  const bool lm = model.task == models::Task::LanguageModel;
  if ((o.task == "lm") == lm) return;
  throw std::invalid_argument(
      "--task " + o.task + " does not fit --model " + o.model + ": it is " +
      (lm ? "a language model (task lm); pass a classifier (lstm-classifier, bert-tiny, bert, ...) for --task classify"
          : "a classifier (task classify); pass a language model (gpt-char, gpt-tiny, ...) for --task lm") +
      ", or leave --task out");
}

// The caller's datasets (the Python package's data=): what the model reads
// must be what they hold.
void open_external(const TrainOptions& o, const models::Model& model, bool reads_tokens, Datasets& d) {
  if (model.task == models::Task::LanguageModel)
    throw std::invalid_argument("model '" + o.model + "' is a language model, which trains on text files: pass data= "
                                "a path; in-process data is for classifiers (images, or token ids with labels)");
  for (const auto& ds : {o.train_dataset, o.test_dataset}) {
    if (!ds) continue;
    if (reads_tokens && ds->is_image())
      throw std::invalid_argument("model '" + o.model + "' reads token ids, but data= holds images: pass token ids "
                                  "[N, T] (int) with labels [N], or an image model");
    if (!reads_tokens && !ds->is_image())
      throw std::invalid_argument("model '" + o.model + "' reads images, but data= holds token ids: pass images "
                                  "[N, C, H, W] or [N, H, W, C], or a text classifier (lstm-classifier, bert-tiny, ...)");
  }
  if (o.test_dataset) {
    const std::string a = describe(o.train_dataset->tensors()), b = describe(o.test_dataset->tensors());
    if (a != b)
      throw data::DataError("test_data= holds samples of another shape or type than data=: data= " + a +
                            "; test_data= " + b);
  }
  d.train_held = o.train_dataset;
  d.test_held = o.test_dataset;
  d.external = dynamic_cast<const data::ExternalDataset*>(o.train_dataset.get());
}

Datasets open_data(const TrainOptions& o, bool stream, std::ostream* log) {
  Datasets d;
  const std::shared_ptr<const models::Model> held = o.resolved_model();
  const models::Model& model = *held;
  check_task(o, model);
  if (log)
    for (const auto& note : model.notes) *log << "memfit: " << note << "\n";
  const bool reads_tokens = std::any_of(model.inputs.begin(), model.inputs.end(),
                                        [](const models::InputDecl& in) { return in.name == "tokens"; });
  if (o.train_dataset) {
    open_external(o, model, reads_tokens, d);
  } else if (o.train_texts) {
    if (model.task == models::Task::LanguageModel || !reads_tokens)
      throw std::invalid_argument("model '" + o.model + "' " +
                                  (reads_tokens ? "is a language model, which trains on text files: pass data= a path"
                                                : "reads images, but data= holds labelled texts") +
                                  "; labelled texts train a text classifier (lstm-classifier, bert-tiny, minilm, ...)");
    open_labelled(o, model, d);
  } else if (o.data.rfind("python:", 0) == 0) {
    throw std::invalid_argument("this run's data is '" + o.data + "', data the notebook held (memfit.train(data=...)); "
                                "pass that same data= again (a path names files)");
  } else if (model.task == models::Task::LanguageModel) {
    open_text(o, model, d, log);
  } else if (reads_tokens) {
    open_labelled(o, model, d);
  } else {
    open_images(o, stream, d);
  }
  d.train = d.train_held ? d.train_held.get() : d.train_base.get();
  d.test = d.train_held ? d.test_held.get() : d.test_base.get();
  if (!o.subset.empty()) {
    d.train_sub = std::make_unique<data::Subset>(data::Subset::from_spec(*d.train, data::parse_subset(o.subset), o.seed));
    d.train = d.train_sub.get();
  }
  if (d.test && !o.test_subset.empty()) {
    d.test_sub = std::make_unique<data::Subset>(data::Subset::from_spec(*d.test, data::parse_subset(o.test_subset), o.seed));
    d.test = d.test_sub.get();
  }
  return d;
}

void prepare_streams(Datasets& d, std::ostream& log) {
  for (data::StreamedIdxDataset* s : {d.train_stream, d.test_stream}) {
    if (!s) continue;
    const data::CacheStatus st = s->prepare();
    if (st.action == data::CacheStatus::Built)
      log << "memfit: decompressed " << s->images_path() << " into the dataset cache " << st.path << "\n";
    else if (st.action == data::CacheStatus::Rebuilt)
      log << "memfit: the dataset cache " << st.path << " was unusable (" << st.reason << "); rebuilt it from "
          << s->images_path() << "\n";
  }
}

void describe_data(const Datasets& d, MemoryInputs& mi) {
  mi.data_cache.clear();
  if (d.external) {
    // The notebook's arrays are read where they lie: their bytes are the
    // dataset's resident bytes, which the baseline leaves out and this row
    // shows (once); a torch Dataset's cache file is streamed from disk.
    mi.data_cache = d.external->file();
    mi.data_in = mi.data_cache.empty() ? "memory" : "disk";
    const size_t own = d.external->in_process_bytes();
    mi.data_note = d.external->note() +
                   (own ? " (" + format_bytes(own) + " of the notebook's own memory, read in place)" : "") +
                   (mi.data_cache.empty() ? "" : " streamed from disk (cache: " + mi.data_cache + ")") +
                   " + loader buffers";
  } else if (d.train_stream) {
    mi.data_in = "disk";
    mi.data_cache = d.train_stream->cache_path();
    mi.data_note = mi.data_cache == d.train_stream->images_path()
                       ? "dataset streamed from disk (raw IDX file: " + mi.data_cache + ")"
                       : "dataset streamed from disk (cache: " + mi.data_cache + ")";
  } else if (d.tokenizer) {
    mi.data_in = "memory";
    mi.data_cache = d.token_cache;
    mi.data_note = "text in memory (" + d.text_note + ") + loader buffers";
  } else if (d.idx) {
    mi.data_in = "memory";
    mi.data_note = "dataset in memory + loader buffers";
  } else if (!d.images_note.empty()) {
    mi.data_in = "memory";
    mi.data_note = d.images_note + " + loader buffers";
  } else {
    mi.data_in.clear();
    mi.data_note = "images decoded from disk + loader buffers";
  }
}

size_t data_bytes_of(const data::LoaderMemory& train, const data::LoaderMemory& test) {
  return train.total() + test.pipeline() + test.dataset_resident + test.dataset_transient;
}

}  // namespace memfit::train
