// memfit's token cache: a language model's corpus tokenized once, its
// training and held-out token streams kept in a file of the cache directory
// (data/cache_file.hpp) so that a later run reads them instead of reading
// and tokenizing the text again.
//
// The file's name is "<corpus name>-<16 hex digits>.tokens", the digits a
// hash of its key: the corpus (its absolute path; each of its files' path,
// size and modification time, so an edited, added or removed file changes
// it), the tokenizer (its kind and a hash of its saved form; "char built
// from the corpus" for the corpus's own alphabet), --val-fraction and the
// split seed. Layout, little-endian:
//   magic "MFTOKCA\0" | u32 version | u32 header bytes | u64 key hash |
//   u64 train tokens | u64 held-out tokens | u64 files | u64 documents |
//   u64 held-out documents | u64 tokenizer bytes | u64 payload checksum |
//   u64 slot hash |
//   payload: the tokenizer's saved form, then train and held-out ids (i32).
// The slot hash is the key's without the files' sizes and times: two caches
// of one slot are the same corpus path, tokenizer and split at two states
// of the files, so writing a new one deletes the others (stale: the corpus
// was edited since), and the cache directory does not fill with them.
// The key's full text is hashed, not stored: a name collision would also
// need the same hash in the header. read_token_cache checks the magic, the
// version, the key, the size the counts imply and the payload's checksum,
// and says what is wrong instead of returning a wrong file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memfit::data {

struct TokenCacheKey {
  uint64_t hash = 0;
  uint64_t slot = 0;  // the hash without the files' sizes and modification times
  std::string name;  // the corpus's file or directory name, for the cache file's name
};

// The key of a corpus at `corpus` (a file, or the regular files directly in
// a directory, as read_corpus reads them), a tokenizer identity (kind plus
// a hash of its saved form, or "char:corpus"), the held-out fraction and
// the split seed. Throws std::runtime_error naming a file that cannot be
// stat'ed.
TokenCacheKey token_cache_key(const std::string& corpus, const std::string& tokenizer_identity, double val_fraction,
                              uint64_t seed);

// "<cache_dir>/<name>-<hex>.tokens" (cache_dir "" = fallback_cache_dir()).
std::string token_cache_path(const TokenCacheKey& key, const std::string& cache_dir);

struct TokenCacheData {
  std::string tokenizer;  // saved form (parse_tokenizer reads it)
  std::shared_ptr<std::vector<int32_t>> train, held_out;
  uint64_t files = 0, documents = 0, held_out_documents = 0;
};

// The cache at `path` for `key`: nullopt and `why` empty when there is no
// file; nullopt and `why` saying what is wrong (short, corrupt, another
// key, another version) when it cannot be used. Never throws for a bad file.
std::optional<TokenCacheData> read_token_cache(const std::string& path, const TokenCacheKey& key, std::string& why);

// Writes the cache atomically (data/cache_file.hpp's AtomicFile), then
// deletes the stale caches of the same slot in that directory (other
// "<name>-*.tokens" files of this format whose header has key.slot and
// another key). Returns the paths deleted. Throws std::runtime_error naming
// the path when the directory cannot be made or written (the caller warns
// and goes on from memory); a stale file that cannot be deleted is left.
std::vector<std::string> write_token_cache(const std::string& path, const TokenCacheKey& key,
                                           const TokenCacheData& data);

}  // namespace memfit::data
