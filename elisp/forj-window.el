;;; forj-window.el --- A model's real context window, asked of its server  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; A local server runs a model with a window of its own, often far
;; smaller than the model could take (8k is common), and a request
;; past it is refused (llama.cpp) or silently cut (Ollama).  Before a
;; chat's first request to an OpenAI-compatible server whose model
;; neither the provider's :context-window nor `forj-usage-context-windows'
;; sizes, forj asks the server, once per server and model:
;;
;; - llama.cpp's GET /props: default_generation_settings.n_ctx;
;; - Ollama's POST /api/show: num_ctx among the model's parameters,
;;   else `forj-window-ollama-default' (what Ollama runs a model with
;;   when nothing sets num_ctx), never more than the model's own
;;   context_length;
;; - GET /models: the model's max_model_len (vLLM) or context_length.
;;
;; The answer goes to `forj-usage-learned-windows', which
;; `forj-usage-context-window' reads; a server that says nothing
;; leaves the default.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj-provider)
(require 'forj-usage)

(defcustom forj-window-ollama-default 4096
  "The window Ollama runs a model with when nothing sets its num_ctx, in tokens."
  :type 'natnum
  :group 'forj)

(defcustom forj-window-timeout 3
  "Seconds to wait for a server to say its model's context window."
  :type 'number
  :group 'forj)

(defconst forj-window-user-agent "forj (context window)"
  "The user agent of the questions about a model's window.")

(defun forj-window--request (url data callback)
  "GET URL, or POST DATA (a JSON string) if non-nil.
CALLBACK gets the reply's JSON parsed, or nil."
  (let ((out (generate-new-buffer " *forj-window*" t))
        (process-connection-type nil))
    (make-process
     :name "forj-window" :buffer out :noquery t :connection-type 'pipe :coding 'utf-8-unix
     ;; The user agent says what the question is for, in a server's log.
     :command (append (list forj-provider-curl-program "-q" "--silent" "--fail"
                            "--max-time" (number-to-string forj-window-timeout)
                            "--user-agent" forj-window-user-agent)
                      (and data (list "-H" "Content-Type: application/json" "--data" data))
                      (list url))
     :sentinel
     (lambda (process _event)
       (unless (process-live-p process)
         (let ((json (and (eq (process-exit-status process) 0)
                          (with-current-buffer out
                            (ignore-errors
                              (goto-char (point-min))
                              (json-parse-buffer :object-type 'plist :null-object nil))))))
           (kill-buffer out)
           (funcall callback json)))))))

(defun forj-window--positive (value)
  "VALUE if it is a positive integer, else nil."
  (and (natnump value) (> value 0) value))

(defun forj-window-of-props (json)
  "The window llama.cpp's /props JSON gives, or nil."
  (forj-window--positive
   (or (plist-get (plist-get json :default_generation_settings) :n_ctx)
       (plist-get json :n_ctx))))

(defun forj-window-of-show (json)
  "The window Ollama's /api/show JSON gives, or nil.
num_ctx among the parameters, else Ollama's default, capped by the
model's own context_length."
  (when (consp json)
    (let* ((parameters (plist-get json :parameters))
           (num-ctx (and (stringp parameters)
                         (string-match "^num_ctx[ \t]+\\([0-9]+\\)" parameters)
                         (string-to-number (match-string 1 parameters))))
           (info (plist-get json :model_info))
           (trained (cl-loop for (key value) on info by #'cddr
                             when (string-suffix-p ".context_length" (symbol-name key))
                             return value)))
      (forj-window--positive
       (let ((used (or num-ctx forj-window-ollama-default)))
         (if (forj-window--positive trained) (min used trained) used))))))

(defun forj-window-of-models (json model)
  "The window of MODEL in an OpenAI-style /models JSON, or nil."
  (let ((item (cl-find model (append (plist-get json :data) nil)
                       :key (lambda (item) (plist-get item :id)) :test #'equal)))
    (forj-window--positive
     (or (plist-get item :max_model_len) (plist-get item :context_length)))))

(defun forj-window-needed-p (provider)
  "Non-nil when nothing sizes PROVIDER's window but its server could say it."
  (and (eq (plist-get provider :family) 'openai)
       (stringp (plist-get provider :url))
       (stringp (plist-get provider :model))
       (not (plist-get provider :context-window))
       (not (forj-usage-known-window provider))
       (not (gethash (forj-usage-window-key provider) forj-usage-learned-windows))))

(defun forj-window-learn (provider then)
  "Ask PROVIDER's server for its model's context window, then call THEN.
THEN is called at once when the window is known already or nothing
could say it; else when the server has answered (or not, within
`forj-window-timeout' seconds per question)."
  (if (not (forj-window-needed-p provider))
      (funcall then)
    (let* ((url (string-remove-suffix "/" (plist-get provider :url)))
           (root (string-remove-suffix "/v1" url))
           (model (plist-get provider :model))
           (key (forj-usage-window-key provider))
           (learnt (lambda (window)
                     ;; `none' says the server was asked: it is not asked again.
                     (puthash key (or window 'none) forj-usage-learned-windows)
                     (funcall then))))
      (forj-window--request
       (concat root "/props") nil
       (lambda (json)
         (if-let ((window (forj-window-of-props json)))
             (funcall learnt window)
           (forj-window--request
            (concat root "/api/show") (json-serialize (list :model model))
            (lambda (json)
              (if-let ((window (forj-window-of-show json)))
                  (funcall learnt window)
                (forj-window--request
                 (concat url "/models") nil
                 (lambda (json) (funcall learnt (forj-window-of-models json model)))))))))))))

(provide 'forj-window)
;;; forj-window.el ends here
