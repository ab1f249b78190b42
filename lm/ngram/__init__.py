"""Back-off n-gram language models, one package (no module imports another in a circle):

* :mod:`lm.ngram.arpa`: the ARPA format's constants, its unknown-word symbols,
  :class:`ArpaFormatError` and the one writer (:func:`~lm.ngram.arpa.write_arpa_file`);
* :mod:`lm.ngram.keys`: sortable keys of n-gram rows (:class:`~lm.ngram.keys.Packer`,
  :func:`~lm.ngram.keys.find_keys`), shared by the three below;
* :mod:`lm.ngram.store`: the one ARPA reader, the compact array store and its scorer, and model
  directories (``afp ngram --store``);
* :mod:`lm.ngram.kneser_ney`: modified Kneser-Ney estimation from prepared shards (``afp ngram``);
* :mod:`lm.ngram.prune`: relative-entropy pruning (``afp ngram --prune``);
* :mod:`lm.ngram.sphinx`: PocketSphinx's binary trie LM read into arrays and written as ARPA;
* :mod:`lm.ngram.model`: the dict view of a parsed model (:class:`NgramModel`, the reference
  for the back-off definition) and its scorer, re-exported here.

Imports run ``arpa, keys <- store <- kneser_ney <- prune``; ``model`` reads through ``store``.
"""

from lm.ngram.model import (BOS, EOS, LOG10, LOG_FLOOR, UNK, ArpaFormatError, Gram, NgramModel, NgramScorer,
                            parse_arpa, read_arpa, sentence_logprob)

__all__ = ["BOS", "EOS", "LOG10", "LOG_FLOOR", "UNK", "ArpaFormatError", "Gram", "NgramModel", "NgramScorer",
           "parse_arpa", "read_arpa", "sentence_logprob"]
