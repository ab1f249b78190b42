"""Back-off n-gram language models, one package (no module imports another in a circle):

* :mod:`lm.ngram.arpa`: the ARPA format, its back-off definition, its unknown-word symbols,
  :class:`~lm.ngram.arpa.ArpaFormatError` and the one writer (:func:`~lm.ngram.arpa.write_arpa_file`);
* :mod:`lm.ngram.keys`: sortable keys of n-gram rows (:class:`~lm.ngram.keys.Packer`,
  :func:`~lm.ngram.keys.find_keys`), shared by the three below;
* :mod:`lm.ngram.store`: the one ARPA reader, the compact array store and its scorer, and model
  directories (``afp ngram --store``);
* :mod:`lm.ngram.kneser_ney`: modified Kneser-Ney estimation from prepared shards (``afp ngram``);
* :mod:`lm.ngram.prune`: relative-entropy pruning (``afp ngram --prune``);
* :mod:`lm.ngram.sphinx`: PocketSphinx's binary trie LM read into arrays and written as ARPA.

Imports run ``arpa, keys <- store <- kneser_ney <- prune``.
"""
