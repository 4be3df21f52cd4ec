// JupyterLab plugin: registers C-Lisp with the editor language registry, under the name the
// Quasi kernel's `language_info` gives (`codemirror_mode` "c-lisp"), so its notebooks use it.

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IEditorLanguageRegistry } from '@jupyterlab/codemirror';

import { cLispSupport } from './clisp.js';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'quasi-jupyterlab:c-lisp',
  description: 'C-Lisp syntax highlighting for notebooks of the Quasi kernel.',
  autoStart: true,
  requires: [IEditorLanguageRegistry],
  activate: (_app: JupyterFrontEnd, languages: IEditorLanguageRegistry): void => {
    languages.addLanguage({
      name: 'c-lisp',
      displayName: 'C-Lisp',
      mime: 'text/x-c-lisp',
      extensions: ['cl'],
      support: cLispSupport()
    });
  }
};

export default plugin;
