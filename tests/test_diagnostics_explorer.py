"""The pictures and the ipywidgets explorer, driven from code: setting a widget's value updates the plot and its data."""
import matplotlib
matplotlib.use('Agg')
import pytest, torch
from eagle_nb.target import tiny_target
from eagle_nb.diagnostics import capture_states, demo_samples, default_taps, compare, explorer, \
    plot_layer_curves, plot_cross_layer, plot_token_errors, token_metrics
from eagle_nb.emulators import drop_prefix_rows

pytestmark = pytest.mark.usefixtures('one_torch_thread')


@pytest.fixture(scope='module')
def comparison():
    t = tiny_target('qwen3', seed=77)
    s = demo_samples(t, 4, 30, 90, seed=13)
    b = capture_states(t, s, default_taps(t.num_layers), dtype=torch.bfloat16)      # bf16: small errors that differ per layer
    b = drop_prefix_rows(b, lambda sid, T: 5 if sid.endswith('1') else 0)
    return compare(capture_states(t, s), b)

def test_token_metrics(comparison):
    c = comparison
    sid = [s for s in c._align if s.endswith('1')][0]
    d = token_metrics(c, sid, 'final')
    assert len(d) == c._align[sid]['tokens_a'] - 5 and d['token'].min() == 5
    assert (d['rel_err'] < comparison.layers.iloc[-1]['envelope']).mean() > 0.9 and (d['cos'] > 0.999).all()

def test_plots(comparison):
    f = plot_layer_curves(comparison)
    assert len(f.axes) == 2 and len(f.axes[0].lines) >= 4
    f = plot_cross_layer(comparison)
    assert f.axes[0].images[0].get_array().shape == comparison.cross['rel_err'].shape
    sid = [s for s in comparison._align if s.endswith('1')][0]
    f = plot_token_errors(comparison, sid, 0)
    assert any('without a row' in t.get_text() for t in f.axes[0].get_legend().get_texts())

def test_explorer_follows_widgets(comparison):
    e = explorer(comparison)
    assert e.updates == 1 and e.fig.axes[0].get_ylabel() == 'rel_err'
    first = e.data.copy()
    e.slot.value = 2
    assert e.updates == 2 and e.data['token'].equals(first['token']) and not e.data['rel_err'].equals(first['rel_err'])
    assert comparison.cross['b_labels'][2] in e.fig.axes[0].get_title()
    e.metric.value = 'cos'
    assert e.updates == 3 and e.fig.axes[0].get_ylabel() == 'cos'
    other = [s for s in comparison._align if s != e.sample.value][0]
    e.sample.value = other
    assert e.updates == 4 and other in e.fig.axes[0].get_title() and len(e.data) == len(token_metrics(comparison, other, 2))
