"""Lattice file formats: Kaldi text, HTK SLF, k2 dicts, OpenFst text and JSON.

Each module reads text (or a k2 dict) into :class:`lattices.lattice.Lattice` objects and writes
them back; malformed input raises :class:`lattices.lattice.LatticeFormatError` naming the
source, lattice key, line and field.
"""
