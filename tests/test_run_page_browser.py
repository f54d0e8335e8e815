"""The run page (`eagle_nb.pipeline.write_index`) of a synthetic quick run, opened in headless Chromium: it loads
without errors, leads with the rounded headline numbers (τ and α_k bars, speed-up against break-even, the store's
diagnosis, bytes/token, held-out accuracy per TTT step, the loss curve), keeps each stage's raw JSON folded, and a
screenshot is saved."""
import json, re
from pathlib import Path
import pytest
from cdp import Browser, chromium_path
from eagle_nb.pipeline import write_index
from eagle_nb.core import runs_dir

def _stage(i, nb, stage, metrics, seconds=12.5, status='ok', error=None):
    return dict(_idx=i, stage=stage, notebook=nb, seconds=seconds, status=status, error=error, metrics=metrics, parameters={},
                html=f'{i:02d}_{stage}.html')

def synthetic_run(below_break_even=True, usable=True):
    "Stage metrics shaped like a quick run's (the keys each notebook writes), with made-up 17-digit values."
    tau = 1.1290322580645162 if below_break_even else 2.3548387096774195
    verdicts = ([dict(kind='match', where='all', summary='every slot matches within its dtype envelope (worst median error = 0.19 × envelope) on 4 samples',
                      fix='nothing to fix', blocking=False)] if usable else
                [dict(kind='layer_offset', where='slot 0 (HF 2), slot 1 (HF 15), slot 2 (HF 27)', summary="B's slots claimed as HF [2, 15, 27] hold HF [1, 14, 26] (offset -1)",
                      fix='extract with ids [2, 15, 27] as vLLM numbers them', blocking=True)])
    return [
        _stage(0, '00_data.ipynb', 'prepare', dict(samples=214, tokens=61234, heldout=16, draft_vocab_size=8192, lengths=list(range(50)))),
        _stage(1, '01_extract.ipynb', 'extract', dict(target='smollm2-135m', samples=214, tokens=61234, tokens_per_s=643.7281105990783, layers=[2, 15, 27],
                                                    aux_dtype='bfloat16', signal='final', bytes_per_token=4611.0, specforge_bytes_per_token=4608)),
        _stage(2, '02_diagnostics.ipynb', 'diagnose', dict(usable=usable, kinds=[v['kind'] for v in verdicts], samples=4, tokens=2048,
                                                         verdicts=verdicts, summary=f"{'usable' if usable else 'NOT usable'}: {verdicts[0]['kind']} on 4 samples",
                                                         store='/run/store')),
        _stage(3, '03_train.ipynb', 'train', dict(steps=214, tokens=58012, tokens_per_s=318.44444444444446, tau_sim=0.21034482758620688,
                                                heldout_acc=[0.18181818181818182, 0.13636363636363635, 0.11688311688311688, 0.10227272727272728, 0.0921, 0.088, 0.085],
                                                heldout_acc_chain=[0.18181818181818182, 0.2049, 0.2513, 0.1, 0.0, 0.0, 0.0], tau_chain=0.2411111111111111,
                                                loss_curve=[[s, 10.0 * 0.99 ** s + 5] for s in range(1, 215, 3)])),
        _stage(4, '04_eval.ipynb', 'eval', dict(metrics=dict(accept_length=tau, alpha=[0.11666666666666667, 0.10344827586206896, 0.0]),
                                              speed=dict(speedup=0.8512345678901234 if below_break_even else 1.6012345678901234, lossless=True,
                                                         lossless_up_to_ties=True, plain_tokens_per_s=21.33333333333333, spec_tokens_per_s=18.15873015873016),
                                              break_even=dict(tau_break_even=1.3312345678901234, below=tau < 1.3312345678901234, draft_step_cost=0.07012345678901234,
                                                              verify_cost=1.1212345678901234, rest_cost=0.0412345678901234, predicted_speedup=tau / 1.3312345678901234, tau_for_2x=2.6624691357802468))),
    ]

def test_page_text_is_rounded_and_explains(tmp_path):
    page = write_index(tmp_path, dict(profile='quick'), synthetic_run()).read_text()
    top = page.split('<h2>Stages</h2>')[0]
    for shown in ('τ 1.13', '0.85×', 'below break-even τ 1.33', 'needs τ ≥ 1.33', 'usable', '4,611 B/token', 'τ_sim 0.21', 'α3',
                  '0.070 per draft step', '1.12 for the verify forward', '0.04 for prefill',
                  '0.18 / 0.20 / 0.25 / 0.10 / 0.00 / 0.00 / 0.00, τ_chain 0.24'):   # fixed decimals: 1.03 is not shown as "1"
        assert shown in top, shown
    assert not re.search(r'\d\.\d{5,}', re.sub(r'<details>.*?</details>', '', page, flags=re.S))
    fast = write_index(tmp_path, dict(profile='quick'), synthetic_run(below_break_even=False, usable=False)).read_text()
    assert 'above break-even τ 1.33' in fast and 'NOT usable' in fast and 'fix: extract with ids' in fast

@pytest.mark.skipif(chromium_path() is None, reason='chromium is not installed (make test installs it)')
def test_run_page_in_browser(tmp_path):
    run = tmp_path/'quick-synthetic'; run.mkdir()
    stages = synthetic_run()
    for m in stages: (run/m['html']).write_text('<!doctype html><title>report</title>')   # the linked reports exist
    for m in stages:
        stem = f"{m['_idx']:02d}_{m['stage']}"
        (run/f'{stem}.metrics.json').write_text(json.dumps(m)); (run/f'{stem}.ipynb').write_text('{}')
    index = write_index(run, dict(profile='quick', stages=[]), stages)
    shots = runs_dir()/'run_page'; shots.mkdir(parents=True, exist_ok=True)
    with Browser(width=1200, height=1600) as b:
        assert b.load(index.as_uri()) == []
        cards = b.eval('[...document.querySelectorAll(".card")].map(c => c.id)')
        assert cards == ['acceptance', 'speed', 'diagnosis', 'store', 'training'], cards
        assert b.eval('document.querySelectorAll("#acceptance svg rect").length') == 3           # α_1..α_3
        assert b.eval('document.querySelectorAll("#training svg rect").length') == 7             # TTT positions 1..7
        assert b.eval('document.querySelectorAll("#training svg polyline").length') == 1         # the loss curve
        text = b.eval('document.body.innerText')
        assert 'τ 1.13' in text and '0.85×' in text and 'below break-even' in text
        assert '0.8512345678901234' not in text                                                  # raw JSON folded away
        assert b.eval('[...document.querySelectorAll("details")].every(d => !d.open)')
        b.eval('document.querySelector("#stage-eval details").open = true')
        assert '0.8512345678901234' in b.eval('document.body.innerText')                        # one click away
        b.eval('document.querySelector("#stage-eval details").open = false')
        bad = b.eval('[...document.querySelectorAll("a")].filter(a => !a.href.startsWith("file:")).length')
        assert bad == 0
        b.screenshot(shots/'index.png')
    assert (shots/'index.png').stat().st_size > 20_000
