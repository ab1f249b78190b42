"""Back-off n-gram language models, one package (no module imports another in a circle):

* :mod:`lm.ngram.arpa`: the ARPA format, its back-off definition, its unknown-word symbols and
  :class:`~lm.ngram.arpa.ArpaFormatError`;
* :mod:`lm.ngram.keys`: sortable keys of n-gram rows (:class:`~lm.ngram.keys.Packer`,
  :func:`~lm.ngram.keys.find_keys`), shared by the three below;
* :mod:`lm.ngram.store`: the one ARPA reader, the compact array store and its scorer, and model
  directories (``afp ngram --store``);
* :mod:`lm.ngram.kneser_ney`: modified Kneser-Ney estimation from prepared shards (``afp ngram``);
* :mod:`lm.ngram.prune`: relative-entropy pruning (``afp ngram --prune``).

Imports run ``arpa, keys <- store <- kneser_ney <- prune``.
"""
