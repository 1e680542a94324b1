;;; forj-models.el --- The model of a chat, and the models local servers offer  -*- lexical-binding: t; -*-

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

;; `forj-set-model' switches the provider and model of a chat, from its
;; next request on: it completes over the models of every provider that
;; can be used now (its key is found, or it is a local server), the
;; current one marked.  A provider's models are its :model, its :models
;; and, for a local server, what the server itself lists: GET URL/models
;; (the OpenAI-compatible listing of llama.cpp, vLLM, LM Studio, Ollama)
;; or, when that fails, Ollama's own /api/tags.  Listing runs curl in an
;; asynchronous process: the completion shows what has arrived so far,
;; and TAB again shows models listed meanwhile.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj-provider)
(require 'forj-session)


(defcustom forj-models-list-timeout 5
  "Seconds a local server may take to list its models."
  :type 'number
  :group 'forj)

(defvar forj-models--listed (make-hash-table :test #'equal)
  "Provider name -> the models its server listed last.")

(defvar forj-models--failed (make-hash-table :test #'equal)
  "Provider name -> why its server could not list its models, last time asked.")

;;; Listing a server's models

(defun forj-models-parse (text)
  "The model names in TEXT, a listing of an OpenAI-compatible server or of Ollama.
Return nil when TEXT is neither."
  (let* ((json (ignore-errors (forj-provider-json text)))
         (items (and (consp json) (or (plist-get json :data) (plist-get json :models)))))
    (when (vectorp items)
      (delete-dups
       (delq nil (mapcar (lambda (item)
                           (let ((name (or (plist-get item :id) (plist-get item :name)
                                           (plist-get item :model))))
                             (and (stringp name) (not (string-empty-p name)) name)))
                         items))))))

(defun forj-models--get (url callback)
  "GET URL with curl, asynchronously; CALLBACK gets the HTTP status and the body.
The status is nil when nothing answered; the body is then curl's message."
  (let* ((out (generate-new-buffer " *forj-models*" t))
         (process-connection-type nil))
    (make-process
     :name "forj-models"
     :buffer out
     :noquery t
     :connection-type 'pipe
     :coding 'utf-8-unix
     :command (list forj-provider-curl-program "-q" "--silent" "--show-error"
                    "--max-time" (number-to-string forj-models-list-timeout)
                    "--write-out" "\n%{http_code}" url)
     :sentinel
     (lambda (process _event)
       (unless (process-live-p process)
         (let* ((text (with-current-buffer out (buffer-string)))
                (status (and (string-match "\n\\([0-9]+\\)\\'" text)
                             (string-to-number (match-string 1 text))))
                (body (if status (substring text 0 (match-beginning 0)) (string-trim text))))
           (kill-buffer out)
           (funcall callback (and status (> status 0) status) body)))))))

(defun forj-models--tags-url (url)
  "Ollama's /api/tags for a server whose OpenAI-compatible API is at URL."
  (concat (string-remove-suffix "/v1" (string-remove-suffix "/" url)) "/api/tags"))

(defun forj-models-list (provider callback)
  "Ask the local server of PROVIDER for the models it has.
CALLBACK gets the list of names, or nil and a message saying why there
is none.  URL/models is asked first, then Ollama's /api/tags."
  (let* ((name (plist-get provider :name))
         (url (string-remove-suffix "/" (or (plist-get provider :url) "")))
         (done (lambda (models why)
                 (if models
                     (progn (puthash name models forj-models--listed)
                            (remhash name forj-models--failed))
                   (puthash name why forj-models--failed))
                 (funcall callback models why))))
    (forj-models--get
     (concat url "/models")
     (lambda (status body)
       (let ((models (and (eql status 200) (forj-models-parse body))))
         (if models
             (funcall done models nil)
           (forj-models--get
            (forj-models--tags-url url)
            (lambda (tags-status tags-body)
              (let ((tags (and (eql tags-status 200) (forj-models-parse tags-body))))
                (funcall done tags
                         (and (null tags)
                              (cond
                               ((null status) (format "%s does not answer: %s" url body))
                               (t (format "%s/models answered HTTP %d with no models" url status))))))))))))))

(defun forj-models-refresh (&optional callback)
  "Ask every local server in `forj-providers' for its models, in the background.
CALLBACK, if given, is called with each provider's name when it answers."
  (dolist (entry forj-providers)
    (let ((provider (forj-provider-get (car entry))))
      (when (and (plist-get provider :local) (plist-get provider :url))
        (forj-models-list provider (lambda (&rest _)
                                     (when callback (funcall callback (car entry)))))))))

;;; Choosing

(defun forj-models-of (provider)
  "Return the models of PROVIDER as far as forj knows: its own, then listed ones."
  (delete-dups (delq nil (append (list (plist-get provider :model))
                                 (copy-sequence (plist-get provider :models))
                                 (copy-sequence (gethash (plist-get provider :name) forj-models--listed))))))

(defun forj-models-candidates ()
  "Every model of every provider usable now: an alist (LABEL NAME MODEL).
LABEL is \"NAME/MODEL\", or NAME for a provider without models."
  (cl-loop for (name . _) in forj-providers
           for provider = (forj-provider-get name)
           when (forj-provider-usable-p provider)
           append (let ((models (forj-models-of provider)))
                    (if models
                        (mapcar (lambda (model) (list (concat name "/" model) name model)) models)
                      (list (list name name nil))))))

(defun forj-models--current-label ()
  "The label of the current chat's provider and model, or nil."
  (let ((provider (and forj-session (forj-session-provider forj-session))))
    (when provider
      (if (plist-get provider :model)
          (concat (plist-get provider :name) "/" (plist-get provider :model))
        (plist-get provider :name)))))

(defun forj-models-read (prompt)
  "Read a provider and model with PROMPT; return (NAME MODEL).
Completes over `forj-models-candidates' as they are when asked, so
models a local server lists meanwhile show on the next TAB.  A model
not listed may be typed as NAME/MODEL."
  (let* ((current (forj-models--current-label))
         (table (lambda (string predicate action)
                  (if (eq action 'metadata)
                      `(metadata (category . forj-model)
                                 (display-sort-function . identity)
                                 (annotation-function
                                  . ,(lambda (label)
                                       (let ((name (car (split-string label "/"))))
                                         (cond ((equal label current) "  ← current")
                                               ((gethash name forj-models--failed)
                                                (format "  (%s)" (gethash name forj-models--failed)))
                                               (t ""))))))
                    (complete-with-action action (mapcar #'car (forj-models-candidates))
                                          string predicate))))
         (label (completing-read prompt table nil nil nil nil current))
         (known (assoc label (forj-models-candidates))))
    (cond
     (known (cdr known))
     ((string-match "\\`\\([^/]+\\)/\\(.+\\)\\'" label)
      (let ((name (match-string 1 label)) (model (match-string 2 label)))
        (unless (forj-provider-get name)
          (user-error "No provider named %s in `forj-providers' (M-x forj-setup adds one)" name))
        (list name model)))
     (t (user-error "Choose one of the listed models, or type PROVIDER/MODEL")))))

;;;###autoload
(defun forj-set-model (name model)
  "Talk to MODEL of the provider NAME in this chat, from the next request on.
Interactively, choose among the models of every provider usable now
\(the current one is marked); local servers are asked which models
they offer, in the background."
  (interactive
   (progn
     (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
     (forj-models-refresh)
     (forj-models-read "Model (provider/model): ")))
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (let ((provider (forj-provider-get name)))
    (unless provider (user-error "No provider named %s in `forj-providers'" name))
    (unless (forj-provider-usable-p provider)
      (user-error "%s has no API key yet: M-x forj-setup stores one" name))
    (setf (forj-session-provider forj-session) (if model (plist-put provider :model model) provider))
    (force-mode-line-update)
    (forj-session-notice (format "model: %s%s, from the next request on"
                                 name (if model (concat " " model) "")))))

(provide 'forj-models)
;;; forj-models.el ends here
