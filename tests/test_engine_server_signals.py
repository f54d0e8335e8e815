"An EngineServer's process group is stopped when its owner gets SIGTERM (atexit alone does not run then)."
import os, signal, subprocess, sys, textwrap, time

SCRIPT = textwrap.dedent('''
    import sys, time
    from eagle_nb.engines import EngineServer, free_port
    port = free_port()
    s = EngineServer([sys.executable, '-m', 'http.server', str(port), '--bind', '127.0.0.1'], port, sys.argv[1],
                     health_path='/', name='http', startup_timeout=60)
    s.start()
    print(s.pid, flush=True)
    time.sleep(120)
''')

def _alive(pid):
    try: os.kill(pid, 0)
    except ProcessLookupError: return False
    with open(f'/proc/{pid}/stat') as f: return f.read().rsplit(')', 1)[1].split()[0] != 'Z'

def test_sigterm_stops_the_servers_it_started(tmp_path):
    p = subprocess.Popen([sys.executable, '-c', SCRIPT, str(tmp_path/'http.log')], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    server = None
    try:
        server = int(p.stdout.readline())
        assert _alive(server)
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == -signal.SIGTERM          # it still dies of SIGTERM
        deadline = time.time() + 30
        while _alive(server) and time.time() < deadline: time.sleep(0.1)
        assert not _alive(server), f"server {server} outlived its owner's SIGTERM"
    finally:
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
        if server and _alive(server): os.killpg(server, signal.SIGKILL)
