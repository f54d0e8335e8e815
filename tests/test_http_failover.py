"""The shared HTTP transport under the live SGLang benchmark: a server that fails every /generate (503) or tears its
bodies is failed over to the next one, and the metrics equal a run against healthy servers only."""
import pytest

from eagle_nb.core import EagleNbError
from eagle_nb.eval import sglang_spec_benchmark
from eagle_nb.http import Retry
from test_eval_sglang import FakeSpecSGLang, prompts, target  # noqa: F401  (target is a fixture)


class Sick(FakeSpecSGLang):
    "Answers server info, then fails every /generate with `fault`: '503' or 'torn' (a body cut short of its Content-Length)."
    def __init__(self, target, fault='503'):
        super().__init__(target, 'new'); self.fault, self.failed = fault, 0
    def _handler(self):
        base, fake = super()._handler(), self
        class H(base):
            def do_POST(self):
                fake.failed += 1
                if fake.fault == '503': return self._send(503, {'detail': 'overloaded'})
                self.send_response(200); self.send_header('Content-Length', '1000'); self.end_headers(); self.wfile.write(b'{"meta')
                self.close_connection = True
        return H


@pytest.mark.parametrize('fault', ['503', 'torn'])
def test_a_failing_server_is_failed_over(target, fault):
    ps = prompts(target, 4)
    with FakeSpecSGLang(target, 'new') as ref:
        want = sglang_spec_benchmark(ref.url, ps, max_new_tokens=16)['metrics']['all']
    with Sick(target, fault) as bad, FakeSpecSGLang(target, 'new') as good:
        doc = sglang_spec_benchmark([bad.url, good.url], ps, max_new_tokens=16, concurrency=2, retry=Retry(backoff=0.01))
    assert bad.failed == 2 and len(good.results) == 4                  # prompts 0 and 2 went to `bad` first
    assert [r['url'] for r in doc['requests']] == [good.url] * 4
    got = doc['metrics']['all']
    assert got['accept_length'] == pytest.approx(want['accept_length']) and got['verify_count'] == want['verify_count']


def test_attempts_spent_say_what_happened(target):
    ps = prompts(target, 1)
    with Sick(target, '503') as bad:
        with pytest.raises(EagleNbError, match='HTTP 503'):
            sglang_spec_benchmark(bad.url, ps, retry=Retry(attempts=2, backoff=0.01))
    assert bad.failed == 2
