"""The shape study's report is made from its records alone: the stored records give the
stored report, line for line (docs/measurements/simulation/)."""
import os
import shutil

from conftest import ROOT


def test_the_stored_records_give_the_stored_report(tmp_path):
    from chainermn_torus.simulation import study
    stored = os.path.join(ROOT, 'docs', 'measurements', 'simulation')
    shutil.copy(os.path.join(stored, 'study.jsonl'), str(tmp_path))
    text = study.report(str(tmp_path))
    assert text == open(os.path.join(stored, 'study.md')).read()
    assert '## Fat tree' in text and '## Torus' in text and '## Library all-reduce' in text
    assert os.path.exists(os.path.join(str(tmp_path), 'study-fattree.png'))
