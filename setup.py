"Package metadata comes from settings.ini (nbdev 2 convention); this file only reads it."
from configparser import ConfigParser
import setuptools, shlex

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

licenses = {'apache2': ('Apache Software License 2.0','OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13'.split()

def reqs(key): return shlex.split(cfg.get(key, ''))
lic = licenses[cfg['license']]
min_python = cfg['min_python']

setuptools.setup(
    name=cfg['lib_name'], version=cfg['version'], license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'License :: ' + lic[1],
                 'Natural Language :: ' + cfg['language'].title()] +
                ['Programming Language :: Python :: '+o for o in py_versions[py_versions.index(min_python):]],
    url=cfg['git_url'], packages=setuptools.find_packages(include=['eagle_nb', 'eagle_nb.*']),
    include_package_data=True, install_requires=reqs('requirements'),
    extras_require={'dev': reqs('dev_requirements'), 'sglang': reqs('sglang_requirements'),
                    'vllm': reqs('vllm_requirements')},
    dependency_links=cfg.get('dep_links','').split(), python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(), long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'console_scripts': cfg.get('console_scripts','').split(), 'nbdev': [f'{cfg["lib_path"]}={cfg["lib_path"]}._modidx:d']},
    author=cfg['author'], author_email=cfg['author_email'], description=cfg['description'],
    keywords=cfg['keywords'])
