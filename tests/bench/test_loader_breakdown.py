"""The breakdown table and plot of the ImageNet example's runs."""
import json
import os

from chainermn_torus.bench import loader_breakdown


def _run(path, ranks, loader, affinity, data, fb, ar, up, rate):
    os.makedirs(path)
    med = {'data': data, 'forward_backward': fb, 'allreduce': ar, 'update': up,
           'iteration': data + fb + ar + up}
    with open(os.path.join(path, 'breakdown.json'), 'w') as f:
        json.dump({'median_ms': med, 'loader': loader, 'ranks': ranks}, f)
    with open(os.path.join(path, 'summary.json'), 'w') as f:
        json.dump({'ranks': ranks, 'loader': loader, 'affinity': affinity, 'arch': 'tiny',
                   'iterations_per_second': rate}, f)
    return str(path)


def test_table_and_plot(tmp_path):
    a = _run(tmp_path / 'a', 1, 'serial', None, 10.0, 80.0, 0.0, 10.0, 10.0)
    b = _run(tmp_path / 'b', 2, 'ours', 'auto', 1.0, 80.0, 9.0, 10.0, 10.0)
    runs = loader_breakdown.load_runs([a, b])
    assert [r['label'] for r in runs] == ['1 rank serial', '2 ranks ours (auto)']
    assert abs(runs[0]['data_share'] - 0.1) < 1e-12 and abs(runs[1]['data_share'] - 0.01) < 1e-12
    table = loader_breakdown.format_table(runs)
    assert ('| 2 ranks ours (auto) | tiny | 10.00 | 1.0 | 80.0 | 9.0 | 10.0 | 100.0 | 1.0% |'
            in table)
    png = tmp_path / 'b.png'
    loader_breakdown.plot(runs, str(png))
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and png.stat().st_size > 5000
